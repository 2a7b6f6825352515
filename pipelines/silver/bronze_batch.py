"""One table's batch as bronze holds it: its change rows in (after, upto] and its
backfill chunks reconciled in, as text events, with what the plan needs to know of them
(the chunks' shapes, the columns an event may leave unchanged).

Reading only: nothing here writes a table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType

from pipelines.bronze.schema import OP_TRUNCATE, SNAPSHOTS_SCHEMA
from pipelines.bronze.watermarks import Snapshot
from pipelines.errors import DataError
from pipelines.lake import data_files
from pipelines.local_frames import local_frame
from pipelines.names import split_table
from pipelines.position_columns import is_after_position, is_within
from pipelines.positions import Position
from pipelines.silver.chunk_windows import ChunkWindow, disjoint_keys, invisible_to_snapshot
from pipelines.silver.events import (
    CHANGE_INDEX, LSN, XID, changes_to_events, first_rows, shape_from_row, snapshot_rows,
    value_columns, with_chunk_columns)
from pipelines.silver.key_change import expand_key_changes
from pipelines.silver.reconcile import WINDOW_SCHEMA, reconcile_chunks, window_rows
from pipelines.silver.resync import generation_start
from pipelines.silver.scan import TableScan
from pipelines.silver.table_shape import TableShape
from pipelines.silver.tables import SilverContext
from pipelines.spark_jobs import is_classic

MAX_SNAPSHOT_TERMS = 64


@dataclass(frozen=True)
class ChunkShapes:
    """What the first rows of a batch's backfill chunks say about the table."""

    newest: TableShape | None  # the newest chunk's shape
    same_columns: tuple[str, ...] | None  # the column list, if every chunk has the same
    # Proven one row per key: no key in two chunks (chunk_windows.disjoint_keys), each
    # chunk's rows in bronze once (as many as their high watermarks say), one key for all.
    one_per_key: bool = False


def may_prove_chunks(run: SilverContext, table: TableScan) -> bool:
    """Whether the batch's chunk rows may be proven one row per key (chunk_shapes counts
    them to make sure), so that they skip the per-key ordering. Not on a classic driver:
    there the extra joins that skip the ordering cost a batch more Spark jobs (each
    reading the chunks again) than ordering them saves."""
    return (bool(table.windows) and not is_classic(run.spark) and disjoint_keys(table.windows)
            and all(w.rows is not None for w in table.windows))


def chunk_shapes(run: SilverContext, table: TableScan) -> ChunkShapes:
    rows = _chunk_rows(run, table)
    if rows is None:
        return ChunkShapes(None, None)
    # Counting every chunk row costs a scan of them; only a batch whose chunks may be
    # proven one row per key asks (else the first rows alone are read).
    counted = may_prove_chunks(run, table)
    first = F.col("row_index") == 0
    counts = [F.count(F.lit(1)).alias("rows")] if counted else []
    [found] = (rows if counted else first_rows(rows)).agg(
        F.max_by(F.when(first, F.struct("columns", "type_names", "type_mods", "key_columns")),
                 F.when(first, F.struct("read_at", "chunk_id"))).alias("shape"),
        F.collect_set(F.when(first, F.col("columns"))).alias("column_lists"),
        F.collect_set(F.when(first, F.col("key_columns"))).alias("key_lists"),
        F.count(F.when(first, 1)).alias("chunks"), *counts).collect()
    # Every chunk's rows are read with its first row's columns (with_chunk_columns): a
    # chunk with rows but without its first row would vanish from silver, so stop instead.
    with_rows = sum(1 for w in table.windows if w.rows)
    if found.chunks < with_rows:
        raise DataError(f"{table.name}: {with_rows - found.chunks} of {with_rows} backfill "
                        "chunks have no first row (row_index 0) in bronze/snapshots; "
                        "bronze is damaged: run `lakehouse backfill --restart` for the table")
    schema, name = split_table(table.name)
    newest = None if found.shape is None else shape_from_row(schema, name, found.shape)
    lists = found.column_lists or []
    one_per_key = (newest is not None and counted and len(found.key_lists or []) == 1
                   and found.rows == sum(w.rows for w in table.windows))
    return ChunkShapes(newest, tuple(lists[0]) if len(lists) == 1 else None, one_per_key)


def _chunk_rows(run: SilverContext, table: TableScan) -> DataFrame | None:
    if not table.windows or not run.lake.bronze_snapshots.exists():
        return None
    chunk_ids = [w.chunk_id for w in table.windows]
    files = data_files(run.lake.bronze_snapshots, "chunk_id", min(chunk_ids), max(chunk_ids))
    return _of_table(run.bronze_files(files, SNAPSHOTS_SCHEMA), table).filter(
        _any([(F.col("backfill_id") == F.lit(backfill))
              & F.col("chunk_id").isin(sorted({w.chunk_id for w in table.windows
                                               if w.backfill_id == backfill}))
              for backfill in sorted({w.backfill_id for w in table.windows})]))


def _of_table(rows: DataFrame, table: TableScan) -> DataFrame:
    schema, name = split_table(table.name)
    return rows.filter((F.col("schema_name") == schema) & (F.col("table_name") == name))


def batch_events(run: SilverContext, table: TableScan, shape: TableShape, after: Position,
                 upto: Position, chunk_columns: tuple[str, ...] | None = None
                 ) -> tuple[DataFrame, DataFrame]:
    """The table's text events in (after, upto], backfill chunks reconciled in
    (`chunk_columns`: the column list every chunk has, if they all have the same), and
    its change events alone (a plan that needs only them need not reconcile chunks)."""
    keys = shape.key_columns
    rows = _of_table(run.bronze_files(table.files), table)
    new = rows.filter(is_within(F.col("commit_lsn"), F.col("change_index"), after, upto))
    events = changes_to_events(new, shape)
    if table.moved:  # else no update sent an old key: skip a second read of the rows
        events = expand_key_changes(events, keys)
    chunk_rows = _chunk_rows(run, table)
    if chunk_rows is None:
        return events, events
    history = _window_history(run, table)
    window_changes = (changes_to_events(history, shape)
                      .transform(lambda df: expand_key_changes(df, keys)))
    truncates = history.filter(F.col("op") == OP_TRUNCATE).select(
        F.col("commit_lsn").alias(LSN), F.col("change_index").alias(CHANGE_INDEX),
        F.col("xid").alias(XID))
    windows = local_frame(run.spark, window_rows(table.windows, run.generation_starts),
                          WINDOW_SCHEMA)
    chunks = reconcile_chunks(snapshot_rows(with_chunk_columns(chunk_rows, chunk_columns), shape),
                              windows, window_changes, truncates, keys,
                              [c.name for c in shape.columns])
    return events.unionByName(chunks), events


def _window_history(run: SilverContext, table: TableScan) -> DataFrame:
    """The table's bronze rows that may fall in the window of a chunk it applies."""
    newest_high = max(w.high for w in table.windows)
    return (_of_table(_changes_up_to(run, table, newest_high[0]), table)
            .filter(F.col("commit_lsn") <= F.lit(newest_high[0]))
            .filter(window_candidates(table.windows, run.generation_starts)))


def _changes_up_to(run: SilverContext, table: TableScan, lsn: int) -> DataFrame:
    """bronze/changes where window changes of the table's chunks may be, up to `lsn`. A
    classic driver reads the files delta-rs picks (its Delta scan costs a snapshot job
    and a job to filter files); Sail's Delta scan reads the same rows in far less memory
    than a list of Parquet paths (a 10M-row first load: 1.6 GB against 6.3 GB peak)."""
    if not is_classic(run.spark):
        return run.changes
    return run.bronze_files(data_files(run.lake.bronze_changes, "commit_lsn",
                                       window_floor(table.windows, run.generation_starts), lsn))


def toast_columns(run: SilverContext, table: TableScan, shape: TableShape) -> list[str] | None:
    """The columns an event of the batch may leave unchanged (None: any value column).

    Changes leave unchanged what their bronze rows list (`TableScan.unchanged`). A chunk
    row that a window change dropped survives only to supply a value some window change
    left unchanged, and then leaves every column it does not supply unchanged: one small
    action asks whether any window change left a column unchanged at all.
    """
    listed = [c for c in value_columns(shape) if c in table.unchanged]
    if not table.windows or not run.lake.bronze_snapshots.exists():
        return listed
    partial = _window_history(run, table).filter(
        F.size(F.coalesce(F.col("unchanged_toast"), F.array())) > 0)
    return None if partial.select("commit_lsn").limit(1).collect() else listed


def window_candidates(windows: Sequence[ChunkWindow],
                      generation_starts: Sequence[int] = ()) -> Column:
    """Bronze rows that can be window changes of some chunk: after the earliest low
    watermark, or in a transaction one of the snapshots did not see, of the chunks'
    slot generations (a superset; the exact test is per chunk, in reconcile_chunks)."""
    earliest = min(w.low for w in windows)
    after = is_after_position(F.col("commit_lsn"), F.col("change_index"), earliest)
    snapshots = _snapshots(windows)
    if len(snapshots) > MAX_SNAPSHOT_TERMS:  # too long an expression: read all history
        return F.lit(True)
    if not snapshots:
        return after
    unseen = [invisible_to_snapshot(F.col("xid"), F.lit(snap.xmin), F.lit(snap.xmax),
                                    F.array(*(F.lit(x) for x in snap.xip))
                                    .cast(ArrayType(LongType())))
              for snap in snapshots]
    since = _generations_floor(windows, generation_starts)
    return after | ((F.col("commit_lsn") >= F.lit(since)) & _any(unseen))


def window_floor(windows: Sequence[ChunkWindow], generation_starts: Sequence[int] = ()) -> int:
    """The oldest commit LSN window_candidates may keep."""
    snapshots = _snapshots(windows)
    if len(snapshots) > MAX_SNAPSHOT_TERMS:
        return 0
    earliest = min(w.low for w in windows)[0]
    return min(earliest, _generations_floor(windows, generation_starts)) if snapshots \
        else earliest


def _snapshots(windows: Sequence[ChunkWindow]) -> list[Snapshot]:
    return sorted({w.snapshot for w in windows if w.snapshot is not None},
                  key=lambda snap: (snap.xmin, snap.xmax, snap.xip))


def _generations_floor(windows: Sequence[ChunkWindow], generation_starts: Sequence[int]) -> int:
    """Where the slot generation of the chunks' oldest low watermark starts."""
    return min(generation_start(generation_starts, w.low[0]) for w in windows)


def _any(terms: list[Column]) -> Column:
    """The OR of `terms` as a balanced tree. Spark Connect sends an expression as nested
    protobuf messages, and its decoder refuses them past a depth limit that a chain of 40
    ORs of snapshot tests already exceeds."""
    while len(terms) > 1:
        terms = [a | b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) // 2 * 2:]
    return terms[0]
