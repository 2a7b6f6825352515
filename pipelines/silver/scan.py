"""What is new in bronze for silver: a summary per table, read on the driver.

Each table's new rows are those after its progress position. The scan summarizes them
per table (newest shape, counts, newest position) with the control rows (truncates and
backfill watermarks), which are few, from bronze's files with no Spark job
(bronze_summary.py). When more rows are new than one batch may hold, it counts them per
commit-LSN bucket with the engine and scans again up to the end of the first slice
(slicing.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Callable, Collection, Iterable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipelines.bronze.schema import OP_TRUNCATE
from pipelines.errors import DataError
from pipelines.lake import TableLocation
from pipelines.position_columns import is_after, is_before_position
from pipelines.positions import Position
from pipelines.silver.bronze_summary import TableSummary, summarize, watermarks_upto
from pipelines.silver.events import shape_from_row
from pipelines.silver.progress import Progress
from pipelines.silver.resync import resync_floor
from pipelines.silver.slicing import first_slice_end
from pipelines.silver.table_shape import TableShape
from pipelines.silver.chunk_windows import (
    ChunkWindow, LandedWatermark, chunk_windows, parse_watermark)

# A batch of at most this many bronze rows is small: the driver holds what silver stages
# from it (a few rows per bronze row: at most tens of MB unless values are large). Larger
# batches gain nothing from it: 30,000 updates into 300,000 rows took a median 6.9 s held
# against 6.1 s staged as Parquet on a warm classic local[2] driver, 0.84 s against 0.79 s
# on Sail (2026-12-07, six alternating runs each).
SMALL_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class Closing:
    """A truncate, or the end of a resync: at `at` every row last written at or below
    `floor` is gone (a truncate's floor is its own position; a resync's, resync.py)."""

    at: Position
    at_micros: int | None  # its commit time, Unix microseconds
    floor: Position


@dataclass
class TableScan:
    """One table's new bronze rows, summarized."""

    name: str
    shape: TableShape | None = None
    shape_error: str | None = None
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    truncate: Position | None = None  # the newest truncate (or resync floor, resync.py)
    closings: list[Closing] = field(default_factory=list)  # all of them (history.py)
    moved: bool = False  # some update sent an old key: maybe a key change
    unchanged: frozenset[str] = frozenset()  # columns some update left unchanged (TOAST)
    windows: list[ChunkWindow] = field(default_factory=list)
    window_error: str | None = None
    files: tuple[str, ...] = ()  # bronze's data files that hold its new rows

    @property
    def has_work(self) -> bool:
        return bool(self.inserts or self.updates or self.deletes or self.truncate
                    or self.windows or self.window_error)

    @property
    def change_rows(self) -> int:
        return self.inserts + self.updates + self.deletes

    @property
    def small(self) -> bool:
        """Whether the batch has at most SMALL_BATCH_ROWS rows in bronze (every chunk's
        count known): what silver stages from them, a few rows per bronze row at most,
        is then held by the driver (catalog.staged)."""
        chunk_rows = [window.rows for window in self.windows]
        return None not in chunk_rows and \
            self.change_rows + sum(chunk_rows) <= SMALL_BATCH_ROWS


@dataclass
class BronzeScan:
    """Everything new in bronze for the tables in scope, up to `upto`."""

    upto: Position | None
    newest_commit_micros: int | None  # the newest commit time, Unix microseconds
    tables: dict[str, TableScan]
    sliced: bool = False  # more is new after `upto`: the batch is one slice of it


def _name(schema: Column, table: Column) -> Column:
    return F.concat_ws(".", schema, table)


def lower_bounds(progress: Progress, scope: Iterable[str] | None
                 ) -> tuple[dict[str, Position], Position]:
    """Each known table's exclusive lower bound, and the one for tables not seen yet."""
    bounds = {name: p.position for name, p in progress.tables.items()}
    if scope is not None:
        bounds = {n: bounds.get(n, progress.scanned) for n in scope}
    return bounds, progress.scanned


def new_rows(changes: DataFrame, bounds: dict[str, Position], default: Position,
             scope: Iterable[str] | None, until: Position | None = None,
             excluded: Collection[str] = ()) -> DataFrame:
    """Rows after each table's bound (messages: after the lowest bound), up to `until`,
    of the tables in `scope` (None: all) but `excluded`."""
    lowest = min([default, *bounds.values()])
    name = _name(F.col("schema_name"), F.col("table_name"))
    lsn, index = F.when(F.col("schema_name").isNull(), F.lit(lowest[0])), \
        F.when(F.col("schema_name").isNull(), F.lit(lowest[1]))
    for table, bound in bounds.items():
        lsn, index = lsn.when(name == table, F.lit(bound[0])), index.when(name == table,
                                                                          F.lit(bound[1]))
    lsn, index = lsn.otherwise(F.lit(default[0])), index.otherwise(F.lit(default[1]))
    rows = changes.filter(F.col("commit_lsn") >= F.lit(lowest[0]))
    if scope is not None:
        rows = rows.filter(F.col("schema_name").isNull() | name.isin(list(scope)))
    if excluded:
        rows = rows.filter(F.col("schema_name").isNull() | ~name.isin(list(excluded)))
    if until is not None:
        rows = rows.filter(is_before_position(F.col("commit_lsn"), F.col("change_index"),
                                              until, inclusive=True))
    return rows.filter(is_after(F.col("commit_lsn"), F.col("change_index"), lsn, index))


def scan_bronze(bronze: TableLocation, changes: Callable[[], DataFrame],
                bounds: dict[str, Position],
                default: Position, scope: Iterable[str] | None,
                max_rows: int | None = None, until: Position | None = None,
                excluded: Collection[str] = (),
                generation_starts: Sequence[int] = (),
                streams_chunks: Callable[[TableScan], bool] = lambda table: False,
                older_watermarks: Callable[[], list[LandedWatermark]] | None = None
                ) -> BronzeScan:
    """Summarize the new rows per table, up to `until` (no Spark job; a chunk's low
    watermark older than the new rows is read from the bronze files holding watermarks,
    once per scan: `older_watermarks`); `excluded` tables are left out.
    `bronze` is bronze/changes, which `changes()` reads with the engine (asked only by
    a step that needs it: on a classic driver the Delta table costs a Spark job).

    With `max_rows`, a scan that finds more row changes and chunk rows than that counts
    them per bucket of commit LSNs (one action, more for a dense burst) and returns
    the first slice's scan. The chunk rows of a table for which `streams_chunks` holds
    do not count: they stream into the table's write and are not held in memory. A
    resync that ends among the new rows sets its table's floor (resync.py; one more
    action); `generation_starts`: the lake LSNs where slot generations start
    (pipelines.bronze.generations).
    """
    older_watermarks = older_watermarks or cache(
        lambda: watermarks_before(bronze, min([default, *bounds.values()])))
    summary = summarize(bronze, bounds, default, scope, until, excluded)
    if not summary:
        return BronzeScan(None, None, {})
    upto = max(s.top for s in summary)
    newest = [s.newest_micros for s in summary if s.newest_micros is not None]
    tables = _table_scans(summary)
    marks = _add_controls(tables, summary)
    _add_windows(tables, marks, bounds, default, scope, older_watermarks, excluded)
    # the chunks that count, at their high watermarks (each says how many rows it holds)
    chunks = [(w.high, w.rows or 0) for t in tables.values() if not streams_chunks(t)
              for w in t.windows]
    if max_rows is not None and sum(t.change_rows for t in tables.values()) + sum(
            n for _, n in chunks) > max_rows:
        rows = new_rows(changes(), bounds, default, scope, until, excluded)
        end = first_slice_end(rows, min(s.first for s in summary), upto[0], chunks, max_rows)
        if end is not None:
            return replace(scan_bronze(bronze, changes, bounds, default, scope, until=end,
                                       excluded=excluded, generation_starts=generation_starts,
                                       older_watermarks=older_watermarks), sliced=True)
    _add_resync_floors(tables, marks, changes, bounds, default, scope, older_watermarks,
                       excluded, generation_starts)
    return BronzeScan(upto, max(newest) if newest else None, tables)


def _table_scans(summary: Sequence[TableSummary]) -> dict[str, TableScan]:
    """Each summarized table's scan: its counts, flags and shape (or why it has none)."""
    tables: dict[str, TableScan] = {}
    for s in summary:
        if s.schema_name is None:
            continue
        scan = _table_scan(tables, f"{s.schema_name}.{s.table_name}")
        scan.inserts, scan.updates, scan.deletes = s.inserts, s.updates, s.deletes
        scan.moved = s.moved
        scan.unchanged = frozenset(s.unchanged)
        scan.files = tuple(s.files)
        if s.shape is not None:
            try:
                scan.shape = shape_from_row(s.schema_name, s.table_name, s.shape)
            except DataError as exc:
                scan.shape_error = str(exc)
    return tables


def _add_controls(tables: dict[str, TableScan], summary: Sequence[TableSummary]
                  ) -> list[LandedWatermark]:
    """Record the summary's truncates on their tables' scans, and return the backfill
    watermarks among its control rows, in bronze order."""
    marks: list[LandedWatermark] = []
    control = sorted(((s.schema_name, s.table_name, c) for s in summary for c in s.controls),
                     key=lambda t: t[2].position)
    for schema, table, c in control:
        if c.op == OP_TRUNCATE:
            scan = _table_scan(tables, f"{schema}.{table}")
            scan.truncate = max(scan.truncate or c.position, c.position)
            scan.closings.append(Closing(c.position, c.commit_micros, c.position))
        else:
            marks.append(parse_watermark(bytes(c.content), c.position,
                                         utc_from_micros(c.commit_micros)))
    return marks


def _table_scan(tables: dict[str, TableScan], name: str) -> TableScan:
    """`name`'s scan in `tables`, added empty when it has none yet."""
    return tables.setdefault(name, TableScan(name))


def _add_windows(tables: dict[str, TableScan], marks: list[LandedWatermark],
                 bounds: dict[str, Position], default: Position,
                 scope: Iterable[str] | None,
                 older_watermarks: Callable[[], Iterable[LandedWatermark]],
                 excluded: Collection[str]) -> None:
    in_scope = None if scope is None else set(scope)
    highs = [m for m in marks if m.kind == "high"
             and (in_scope is None or m.table in in_scope) and m.table not in excluded
             and m.position > bounds.get(m.table, default)]
    if not highs:
        return
    lows = {(m.backfill_id, m.chunk_id) for m in marks if m.kind == "low"}
    if any((h.backfill_id, h.chunk_id) not in lows for h in highs):
        marks = marks + list(older_watermarks())
    by_table: dict[str, list[LandedWatermark]] = {}
    wanted = {(h.backfill_id, h.chunk_id) for h in highs}
    for m in marks:
        if (m.backfill_id, m.chunk_id) in wanted and (m.kind == "low" or m in highs):
            by_table.setdefault(m.table, []).append(m)
    for table, table_marks in by_table.items():
        scan = _table_scan(tables, table)
        try:
            scan.windows = chunk_windows(table_marks)
        except DataError as exc:
            scan.window_error = str(exc)


def _add_resync_floors(tables: dict[str, TableScan], marks: list[LandedWatermark],
                       changes: Callable[[], DataFrame], bounds: dict[str, Position],
                       default: Position, scope: Iterable[str] | None,
                       older_watermarks: Callable[[], Iterable[LandedWatermark]],
                       excluded: Collection[str], starts: Sequence[int]) -> None:
    ends = [m for m in marks if m.kind == "resync" and m.table not in excluded
            and (scope is None or m.table in set(scope))
            and m.position > bounds.get(m.table, default)]
    if not ends:
        return
    every = marks + list(older_watermarks())
    for end in ends:
        scan = _table_scan(tables, end.table)
        floor = resync_floor(changes(), end.table,
                             [m for m in every if m.backfill_id == end.backfill_id], starts)
        scan.truncate = max(scan.truncate or floor, floor)
        micros = None if end.commit_ts is None else int(
            (end.commit_ts - utc_from_micros(0)) // timedelta(microseconds=1))
        scan.closings.append(Closing(end.position, micros, floor))


def watermarks_before(bronze: TableLocation, before: Position) -> list[LandedWatermark]:
    """All watermark messages at or before `before` (a chunk's low may be that old), read
    on the driver from the few bronze files that hold one (no Spark job)."""
    return [parse_watermark(bytes(c.content), c.position, utc_from_micros(c.commit_micros))
            for c in watermarks_upto(bronze, before)]


def utc_from_micros(micros: int | None) -> datetime | None:
    """An aware UTC datetime (collected timestamps are naive, in an engine's time zone)."""
    if micros is None:
        return None
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=micros)
