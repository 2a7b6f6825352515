"""What is new in bronze/changes per table, summarized on the driver: no Spark job.

delta-rs lists the files whose commit-LSN statistics reach past the oldest bound, and
pyarrow reads them one at a time (bronze has no partitions and no deletion vectors, so
its data files are its rows). A run's new bronze is a few of the ingest's files, read in
milliseconds; on a classic Spark driver the same aggregate cost several jobs and about a
second of planning. A large backlog streams through file by file, in bounded memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Iterable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.bronze.schema import (
    CHANGES_SCHEMA, OP_DELETE, OP_INSERT, OP_MESSAGE, OP_TRUNCATE, OP_UPDATE, WATERMARK_PREFIX)
from pipelines.lake import TableLocation, data_files, read_data_file
from pipelines.positions import Position

COLUMNS = ["commit_lsn", "change_index", "commit_ts", "op", "schema_name", "table_name",
           "columns", "type_names", "type_mods", "key_columns", "unchanged_toast",
           "old_values", "message_prefix", "message_content"]
CONTROL_COLUMNS = ["commit_lsn", "change_index", "commit_ts", "op", "message_prefix",
                   "message_content"]
SHAPE = ("columns", "type_names", "type_mods", "key_columns")
_MESSAGES = "\x00"  # the name of the group with no table (messages) in a filter


@dataclass(frozen=True)
class Control:
    """A truncate, or a backfill watermark (a message), as bronze holds it."""

    op: str
    position: Position
    commit_micros: int | None
    content: bytes | None


@dataclass
class TableSummary:
    """One table's new rows (schema_name None: the messages)."""

    schema_name: str | None
    table_name: str | None
    top: Position  # the newest position
    first: int  # the oldest commit LSN
    newest_micros: int | None = None  # the newest commit time
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    moved: bool = False  # some update sent an old key
    unchanged: set[str] = field(default_factory=set)  # columns some update left unchanged
    shape: Mapping[str, list] | None = None  # the newest row's column lists
    shape_at: Position | None = None
    controls: list[Control] = field(default_factory=list)  # in bronze order
    files: list[str] = field(default_factory=list)  # the data files holding these rows


def summarize(bronze: TableLocation, bounds: Mapping[str, Position], default: Position,
              scope: Iterable[str] | None, until: Position | None = None,
              excluded: Collection[str] = ()) -> list[TableSummary]:
    """Per table, the rows after its bound in `bounds` (`default` for the others;
    messages: after the lowest bound), up to `until`, of the tables in `scope` (None:
    all) but `excluded`."""
    lowest = min([default, *bounds.values()])
    found: dict[tuple[str | None, str | None], TableSummary] = {}
    for uri, rows in _files(bronze, lowest, until):
        rows = rows.filter(_new(rows, bounds, default, lowest, scope, until, excluded))
        for summary in _summaries(rows, uri):
            key = (summary.schema_name, summary.table_name)
            found[key] = _combined(found[key], summary) if key in found else summary
    return list(found.values())


def watermarks_upto(bronze: TableLocation, upto: Position) -> list[Control]:
    """Every backfill watermark at or before `upto`, in position order: a run needs a
    chunk's low watermark that an earlier run read. Only the files whose statistics say
    they may hold a watermark message are read (a file of changes alone has no
    message_prefix), so this reads a few files however long bronze is."""
    found: list[Control] = []
    for uri in data_files(bronze, "commit_lsn", None, upto[0],
                          holding=("message_prefix", WATERMARK_PREFIX)):
        rows = read_data_file(bronze, uri, CHANGES_SCHEMA, CONTROL_COLUMNS)
        found += [c for c in _controls(rows.filter(_at_or_before(rows, upto)))
                  if c.op == OP_MESSAGE]
    return sorted(found, key=lambda c: c.position)


def _at_or_before(rows: pa.Table, upto: Position) -> pa.ChunkedArray:
    """The mask of the rows at or before `upto`."""
    lsn, ci = rows["commit_lsn"], rows["change_index"]
    return pc.or_(pc.less(lsn, upto[0]),
                  pc.and_(pc.equal(lsn, upto[0]), pc.less_equal(ci, upto[1])))


def _files(bronze: TableLocation, after: Position, until: Position | None
           ) -> Iterator[tuple[str, pa.Table]]:
    """The data files that may hold a position past `after`, up to `until` (URI and
    rows), in log order."""
    for uri in data_files(bronze, "commit_lsn", after[0], None if until is None else until[0],
                          past=("change_index", after[1])):
        yield uri, read_data_file(bronze, uri, CHANGES_SCHEMA, COLUMNS)


def _new(rows: pa.Table, bounds: Mapping[str, Position], default: Position,
         lowest: Position, scope: Iterable[str] | None, until: Position | None,
         excluded: Collection[str]) -> pa.ChunkedArray:
    """The mask of the rows `summarize` counts."""
    names = pc.fill_null(pc.binary_join_element_wise(rows["schema_name"], rows["table_name"],
                                                     "."), _MESSAGES)
    distinct = pc.unique(names).to_pylist()
    after = {n: lowest if n == _MESSAGES else bounds.get(n, default) for n in distinct}
    index = pc.index_in(names, value_set=pa.array(distinct))
    lsn, ci = rows["commit_lsn"], rows["change_index"]
    bound_lsn = pc.take(pa.array([after[n][0] for n in distinct], pa.int64()), index)
    bound_ci = pc.take(pa.array([after[n][1] for n in distinct], pa.int64()), index)
    keep = pc.or_(pc.greater(lsn, bound_lsn),
                  pc.and_(pc.equal(lsn, bound_lsn), pc.greater(ci, bound_ci)))
    if scope is not None:
        keep = pc.and_(keep, pc.is_in(names, pa.array([*scope, _MESSAGES])))
    if excluded:
        keep = pc.and_(keep, pc.invert(pc.is_in(names, pa.array(list(excluded)))))
    if until is not None:
        keep = pc.and_(keep, _at_or_before(rows, until))
    return keep


def _summaries(rows: pa.Table, uri: str) -> Iterator[TableSummary]:
    """One summary per table among `rows` (of the file at `uri`)."""
    if rows.num_rows == 0:
        return
    groups = rows.select(["schema_name", "table_name"]).group_by(
        ["schema_name", "table_name"]).aggregate([]).to_pylist()
    for group in groups:
        schema, name = group["schema_name"], group["table_name"]
        mask = pc.and_kleene(_matches(rows["schema_name"], schema),
                             _matches(rows["table_name"], name))
        summary = _summary(schema, name, rows.filter(mask))
        summary.files = [uri]
        yield summary


def _matches(column: pa.ChunkedArray, value: str | None) -> pa.ChunkedArray:
    return pc.is_null(column) if value is None else pc.fill_null(pc.equal(column, value), False)


def _summary(schema: str | None, name: str | None, rows: pa.Table) -> TableSummary:
    """The summary of one table's rows."""
    op, lsn = rows["op"], rows["commit_lsn"]
    top = _newest(rows)
    micros = pc.max(rows["commit_ts"].cast(pa.timestamp("us", "UTC")).cast(pa.int64()))
    summary = TableSummary(schema, name, (top["commit_lsn"], top["change_index"]),
                           pc.min(lsn).as_py(), micros.as_py())
    summary.inserts, summary.updates, summary.deletes = (
        pc.sum(pc.equal(op, kind)).as_py() or 0 for kind in (OP_INSERT, OP_UPDATE, OP_DELETE))
    summary.moved = pc.any(pc.and_(pc.equal(op, OP_UPDATE),
                                   pc.is_valid(rows["old_values"]))).as_py() or False
    summary.unchanged = set(pc.unique(pc.list_flatten(rows["unchanged_toast"])).to_pylist())
    shaped = rows.filter(pc.and_(pc.not_equal(op, OP_MESSAGE), pc.greater(
        pc.fill_null(pc.list_value_length(rows["columns"]), 0), 0)))
    if shaped.num_rows:
        row = _newest(shaped)
        summary.shape = {k: row[k] for k in SHAPE}
        summary.shape_at = (row["commit_lsn"], row["change_index"])
    summary.controls = _controls(rows)
    return summary


def _newest(rows: pa.Table) -> dict:
    """The row at the newest position."""
    order = pc.sort_indices(rows, [("commit_lsn", "descending"), ("change_index", "descending")])
    return rows.take(order[:1]).to_pylist()[0]


def _controls(rows: pa.Table) -> list[Control]:
    """The truncates and backfill watermarks among the rows, in position order."""
    op = rows["op"]
    control = pc.or_(pc.equal(op, OP_TRUNCATE), pc.and_(
        pc.equal(op, OP_MESSAGE),
        pc.fill_null(pc.equal(rows["message_prefix"], WATERMARK_PREFIX), False)))
    found = rows.filter(control)
    micros = found["commit_ts"].cast(pa.timestamp("us", "UTC")).cast(pa.int64()).to_pylist()
    return sorted((Control(r["op"], (r["commit_lsn"], r["change_index"]), m,
                           r["message_content"])
                   for r, m in zip(found.select(["op", "commit_lsn", "change_index",
                                                 "message_content"]).to_pylist(), micros)),
                  key=lambda c: c.position)


def _combined(a: TableSummary, b: TableSummary) -> TableSummary:
    """Two summaries of one table's rows (of two files) as one."""
    newer_shape = b if a.shape_at is None or (b.shape_at is not None
                                             and b.shape_at > a.shape_at) else a
    times = [t for t in (a.newest_micros, b.newest_micros) if t is not None]
    return TableSummary(
        a.schema_name, a.table_name, max(a.top, b.top), min(a.first, b.first),
        max(times) if times else None, a.inserts + b.inserts, a.updates + b.updates,
        a.deletes + b.deletes, a.moved or b.moved, a.unchanged | b.unchanged,
        newer_shape.shape, newer_shape.shape_at,
        sorted(a.controls + b.controls, key=lambda c: c.position), a.files + b.files)
