"""What a refresh must know of the tables it reads: how many live rows one has and the
newest position (_lsn, _change_index) it holds.

Each question is asked several times per report and refresh (the driving table before
and after the build, every other table's fingerprint). A table at a lake path is
answered by delta-rs on the driver, reading one or two columns of the files that may
hold the answer and applying deletion vectors: no Spark job, which on a classic driver
costs seconds per question. A catalog table (Unity Catalog on Databricks) has no path
delta-rs may read, so Spark answers there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.catalog import TableRef, read_table
from pipelines.lake import read_delta, statistics_bound
from pipelines.position_columns import is_after_position, sql_is_after
from pipelines.positions import START, Position
from pipelines.silver.events import CHANGE_INDEX, LSN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def row_count(spark: "SparkSession", table: TableRef) -> int:
    """The table's live rows (deleted ones, in deletion vectors, not counted)."""
    if table.path is None:
        return read_table(spark, table).count()
    first = table.path.open().schema().fields[0].name  # one column counts every row
    return read_delta(table.path, [first]).num_rows


def newest_position(spark: "SparkSession", tables: list[TableRef | None],
                    after: Position = START) -> Position | None:
    """The newest position after `after` in any of `tables` (None: the table is left out),
    or None when none holds one."""
    found = [_newest(spark, t, after) for t in tables if t is not None]
    return max((p for p in found if p is not None), default=None)


def _newest(spark: "SparkSession", table: TableRef, after: Position) -> Position | None:
    if table.path is None:
        return _newest_in_frame(read_table(spark, table), after)
    delta = table.path.open()
    newer = sql_is_after(LSN, CHANGE_INDEX, str(after[0]), str(after[1]))
    # The files' statistics bound the newest LSN from above (a row a deletion vector
    # removed may be the one that sets it): the rows at that bound are a file or two, and
    # only when none of them is live is every newer row read.
    actions = pa.table(delta.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return None
    top = statistics_bound(actions, f"max.{LSN}", pc.max)
    if top is not None and top < after[0]:
        return None
    rows = None
    if top is not None:
        rows = _scan(delta, [LSN, CHANGE_INDEX], f"{LSN} >= {top} AND {newer}")
    if rows is None or rows.num_rows == 0:
        rows = _scan(delta, [LSN, CHANGE_INDEX], f"{LSN} >= {after[0]} AND {newer}")
    if rows.num_rows == 0:
        return None
    lsn = pc.max(rows[LSN]).as_py()
    at_lsn = rows.filter(pc.equal(rows[LSN], lsn))
    return lsn, pc.max(at_lsn[CHANGE_INDEX]).as_py()


def _scan(delta, columns: list[str], predicate: str) -> pa.Table:
    """Rows of the table through delta-rs's own engine, which applies deletion vectors and
    skips the files the predicate's columns' statistics rule out (pipelines.lake.read_delta
    filters after reading every column of such a table)."""
    return pa.RecordBatchReader.from_stream(delta.scan(columns=columns, predicate=predicate)
                                            ).read_all()


def _newest_in_frame(df: "DataFrame", after: Position) -> Position | None:
    """The same question as a Spark job: two plain maxima instead of max(struct(...)),
    which Sail computes several times slower; the `_lsn >=` filter lets the engines skip
    the files of older positions."""
    from pyspark.sql import functions as F

    new = df.filter(F.col(LSN) >= after[0]).filter(
        is_after_position(F.col(LSN), F.col(CHANGE_INDEX), after))
    lsn = new.agg(F.max(LSN)).first()[0]
    if lsn is None:
        return None
    return lsn, new.filter(F.col(LSN) == lsn).agg(F.max(CHANGE_INDEX)).first()[0]
