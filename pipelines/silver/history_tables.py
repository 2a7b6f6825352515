"""A silver run's writes to a table's history table (the rules: silver/history.py).

Runs inside the table's silver batch, after its silver and tombstone MERGE statements
and before the run records its progress, from the same staged events: a crash before
the progress is recorded re-runs the batch, which writes the same versions again.
"""

from __future__ import annotations

import logging
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipelines.catalog import TableRef, save_table, staged
from pipelines.errors import DataError
from pipelines.lake import statistics_bound
from pipelines.local_frames import local_frame
from pipelines.names import split_table
from pipelines.position_columns import number_literal
from pipelines.positions import Position, position_number
from pipelines.silver.events import col
from pipelines.silver.evolution import plan_schema
from pipelines.silver.history import (
    HISTORY_COLUMNS, VALID_FROM, closings_sql, fill_from_base, history_merge_sql,
    history_schema, history_versions, open_at)
from pipelines.silver.key_ranges import key_range as find_key_range
from pipelines.silver.scan import TableScan
from pipelines.silver.table_shape import TableShape
from pipelines.silver.tables import SilverContext, create_table, evolve

log = logging.getLogger(__name__)


def apply(run: SilverContext, table: TableScan, shape: TableShape, every: DataFrame,
          after: Position, silver_schema: StructType, old_key: Sequence[Column],
          unchanged: Sequence[str] | None, replace_table: bool,
          key_range: str | None = None) -> None:
    """Write the versions the batch `every` (all its typed, filled events, after
    `after`) opens, updates or closes, and close what its truncates close.
    unchanged: the only columns an event may have left unchanged (None: any);
    key_range: where every's keys are, if the caller knows (else one action finds it)."""
    schema, name = split_table(table.name)
    target = run.names.history(schema, name)
    keys = list(shape.key_columns)
    wanted = history_schema(silver_schema.fields)
    exists = not replace_table and run.exists(target)
    if exists:
        current = run.schema(target)
        source_fields = [f for f in wanted.fields if f.name not in HISTORY_COLUMNS]
        evolve(run, target, current, plan_schema(shape.qualified_name, current, source_fields))
        run.maintenance.prepare(run.spark, target, keys)
        close(run, table)

    columns = [f.name for f in wanted.fields if f.name not in HISTORY_COLUMNS
               and f.name not in keys]
    events = every.select(*(col(n) if n in every.columns
                            else F.lit(None).cast(wanted[n].dataType).alias(n)
                            for n in [*keys, *columns]),
                          *(c for c in every.columns if c not in {*keys, *columns}))
    # every version the batch writes is of these keys
    bounds = key_range if key_range is not None else find_key_range(events, keys)
    fill = [c for c in columns if unchanged is None or c in unchanged]
    # Staged where the TOAST fill and the versions both read it: it is small (the open
    # versions of the batch's keys) where the table is large.
    base = _base(run, target, events, keys, after, bounds) if exists else \
        local_frame(run.spark, [], wanted)
    if exists and fill:
        base = staged(run.spark, base, run.lake.history_staging(schema, name, "base"),
                      table.small)
    filled = fill_from_base(events, base, keys, fill, old_key if table.moved else ())
    versions = staged(run.spark, history_versions(filled, base, keys, columns,
                                                  tracked_columns(run, table, shape,
                                                                  columns),
                                                  table.closings),
                      run.lake.history_staging(schema, name, "versions"), table.small)
    if exists:
        _write_versions(run, target, versions, keys, bounds, after, table.small)
    else:  # a new table is its batch's new versions, in one write
        create_table(run, target, wanted, replace_table,
                     versions.filter(F.col(VALID_FROM) > number_literal(after)))
        log.info("silver %s: history table created at %s", table.name, target)
        run.maintenance.prepare(run.spark, target, keys)


def _write_versions(run: SilverContext, target: TableRef, versions: DataFrame,
                    keys: Sequence[str], bounds: str | None, after: Position,
                    small: bool) -> None:
    """MERGE the versions that started before the batch (they are in the table) and
    append the others (new: far cheaper than matching them); a re-run of the batch
    (its versions are in the table already) and a small batch (TableScan.small: one
    commit costs less than matching its few new versions) MERGE them all. Each MERGE's
    source holds one row per (key, _valid_from), what it matches on."""
    order = run.schema(target).names  # evolved tables hold new columns last
    version = [*keys, VALID_FROM]
    if small or _written_before(run, target, after):
        run.merge(target, lambda view: history_merge_sql(target.sql, view, keys, order,
                                                         bounds),
                  run.unique_source(versions.select(*order), version))
        return
    started = F.col(VALID_FROM) <= number_literal(after)
    run.merge(target, lambda view: history_merge_sql(target.sql, view, keys, order, bounds,
                                                     insert=False),
              run.unique_source(versions.filter(started).select(*order), version))
    save_table(versions.filter(~started).select(*order).write.format("delta").mode("append"),
               target)


def close(run: SilverContext, table: TableScan) -> None:
    """Close the current versions the batch's truncates and resync ends close (also in
    a batch with no row of the table: a bare truncate, a resync that found nothing)."""
    target = run.names.history(*split_table(table.name))
    if not table.closings or not run.exists(target):
        return
    run.modify(target, lambda view: closings_sql(target.sql, table.closings, view))


def tracked_columns(run: SilverContext, table: TableScan, shape: TableShape,
                    columns: Sequence[str]) -> list[str]:
    """The value columns whose change opens a version (silver.history_columns, default
    all); a name the table does not have stops the table before anything is written."""
    keys = shape.key_columns
    tracked = run.history(table.name) or columns
    unknown = sorted(set(tracked) - set(columns) - set(keys))
    if unknown:
        raise DataError(f"silver.history_columns of {table.name}: no column "
                        f"{', '.join(unknown)} in the table (its columns: "
                        f"{', '.join([*keys, *columns])})")
    return [c for c in tracked if c in columns]


def _written_before(run: SilverContext, target: TableRef, after: Position) -> bool:
    """Whether the table holds a version that started after `after`: this batch was
    written before (its run stopped before recording its progress). The log's file
    statistics answer it (delta-rs; no Spark job) where every file has them, else the
    engine reads the files they do not rule out."""
    newest = newest_valid_from(target)
    if newest is not None:
        return newest > position_number(after)
    later = F.col(VALID_FROM) > number_literal(after)
    return bool(run.read(target).filter(later).select(VALID_FROM).limit(1).collect())


def newest_valid_from(target: TableRef) -> int | None:
    """The highest _valid_from of a history table at a lake path, from its files'
    statistics (0: no file); None when they do not say (a catalog table, a file without
    statistics for the column)."""
    if target.path is None:
        return None
    actions = pa.table(target.path.open().get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    return statistics_bound(actions, f"max.{VALID_FROM}", pc.max)


def _base(run: SilverContext, target: TableRef, events: DataFrame, keys: Sequence[str],
          after: Position, bounds: str | None) -> DataFrame:
    """The versions open at `after` of the keys the batch touches, read within the
    batch's key ranges (silver.merge.key_range) so the engines skip the other files."""
    touched = events.select(*(col(k) for k in keys)).distinct()
    history = run.read(target).alias("t")
    if bounds is not None:
        history = history.filter(F.expr(bounds))
    return history.filter(open_at(after)).join(touched, list(keys), "left_semi")
