"""One table's silver batch: from its new bronze rows to MERGE statements.

bronze rows -> text events -> key changes expanded -> backfill chunks reconciled ->
unchanged TOAST filled -> newest event per key above the truncate floor -> typed and cast
to the silver schema (values that cannot be typed kept aside) -> stale events marked ->
staged -> checked -> tables created or evolved -> MERGE into silver, then into its
tombstones.

Tables are read, created and merged into through their TableRef (pipelines.catalog): a
Delta path locally, a Unity Catalog table on Databricks; the statements are the same.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Iterator, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StructField, StructType, TimestampType

from pipelines.bronze.schema import OP_TRUNCATE
from pipelines.catalog import (
    TableNames, TableRef, ensure_schema, read_table, save_table, staged, table_exists)
from pipelines.errors import DataError
from pipelines.lake import Lake, TableLocation
from pipelines.position_columns import is_after_position, is_within
from pipelines.positions import Position
from pipelines.silver import history_tables
from pipelines.silver.batch import filled_events, latest_events, newest_events
from pipelines.silver.events import (
    CHANGE_INDEX, COMMIT_TS, LSN, METADATA, OLD_KEY, OP, UNCHANGED, XID, changes_to_events, col,
    field as struct_field, first_rows, merge_shapes, shape_from_row,
    snapshot_rows, tombstone_keys, value_columns, with_chunk_columns)
from pipelines.silver.evolution import SchemaPlan, plan_schema
from pipelines.silver.key_change import expand_key_changes
from pipelines.silver.maintenance import Maintenance
from pipelines.silver.merge import (
    STALE, add_columns_merge_sql, floor_merge_sql, key_range, mark_stale_events,
    silver_merge_sql, tombstone_merge_sql)
from pipelines.silver.progress import TableProgress
from pipelines.silver.reconcile import WINDOW_SCHEMA, reconcile_chunks, window_rows
from pipelines.silver.resync import generation_start
from pipelines.silver.scan import TableScan
from pipelines.silver.table_shape import SourceColumn, TableShape
from pipelines.silver.toast import fill_from_old_key_rows
from pipelines.silver.types import (
    check_failures, failures_of, spark_type, typed_columns, typed_value, with_failed_texts)
from pipelines.silver.chunk_windows import ChunkWindow, invisible_to_snapshot

log = logging.getLogger(__name__)

METADATA_FIELDS = (StructField(LSN, LongType()), StructField(CHANGE_INDEX, LongType()),
                   StructField(COMMIT_TS, TimestampType()))
SOURCE_VIEW = "_lakehouse_silver_events"
MAX_SNAPSHOT_TERMS = 64
AUTO_MERGE = "spark.databricks.delta.schema.autoMerge.enabled"


@dataclass
class SilverContext:
    """What every table's batch of one run shares."""

    spark: SparkSession
    lake: Lake
    maintenance: Maintenance
    retention: timedelta
    changes: DataFrame
    names: TableNames
    generation_starts: Sequence[int] = ()  # pipelines.bronze.generations
    history: Callable[[str], tuple[str, ...] | None] | None = None  # table -> tracked columns

    def keeps_history(self, table: str) -> bool:
        """Whether schema.table has a history table (silver.history)."""
        return self.history is not None and self.history(table) is not None

    def exists(self, table: TableRef) -> bool:
        """Whether the silver or tombstone table exists yet."""
        return table_exists(self.spark, table)

    def read(self, table: TableRef) -> DataFrame:
        """The table's current version."""
        return read_table(self.spark, table)


def tombstones_path(lake: Lake, schema: str, table: str) -> TableLocation:
    """The sidecar Delta table of a silver table's tombstones (in the lake on every engine)."""
    return TableNames(lake).tombstones(schema, table).path


@dataclass(frozen=True)
class ChunkShapes:
    """What the first rows of a batch's backfill chunks say about the table."""

    newest: TableShape | None  # the newest chunk's shape
    same_columns: tuple[str, ...] | None  # the column list, if every chunk has the same


def _chunk_shapes(run: SilverContext, table: TableScan) -> ChunkShapes:
    rows = _chunk_rows(run, table)
    if rows is None:
        return ChunkShapes(None, None)
    [found] = first_rows(rows).agg(
        F.max_by(F.struct("columns", "type_names", "type_mods", "key_columns"),
                 F.struct("read_at", "chunk_id")).alias("shape"),
        F.collect_set("columns").alias("column_lists"),
        F.count(F.lit(1)).alias("chunks")).collect()
    # Every chunk's rows are read with its first row's columns (with_chunk_columns): a
    # chunk with rows but without its first row would vanish from silver, so stop instead.
    with_rows = sum(1 for w in table.windows if w.rows)
    if found.chunks < with_rows:
        raise DataError(f"{table.name}: {with_rows - found.chunks} of {with_rows} backfill "
                        "chunks have no first row (row_index 0) in bronze/snapshots; "
                        "bronze is damaged: run `lakehouse backfill --restart` for the table")
    schema, name = table.name.split(".", 1)
    newest = None if found.shape is None else shape_from_row(schema, name, found.shape)
    lists = found.column_lists or []
    return ChunkShapes(newest, tuple(lists[0]) if len(lists) == 1 else None)


def _chunk_rows(run: SilverContext, table: TableScan) -> DataFrame | None:
    if not table.windows or not run.lake.bronze_snapshots.exists():
        return None
    schema, name = table.name.split(".", 1)
    ids = run.spark.createDataFrame([(w.backfill_id, w.chunk_id) for w in table.windows],
                                    "backfill_id string, chunk_id long")
    return (run.spark.read.format("delta").load(run.lake.bronze_snapshots.uri)
            .filter((F.col("schema_name") == schema) & (F.col("table_name") == name))
            .join(ids, ["backfill_id", "chunk_id"]))


def _table_rows(run: SilverContext, table: TableScan) -> DataFrame:
    schema, name = table.name.split(".", 1)
    return run.changes.filter((F.col("schema_name") == schema) & (F.col("table_name") == name))


def batch_events(run: SilverContext, table: TableScan, shape: TableShape, after: Position,
                 upto: Position, chunk_columns: tuple[str, ...] | None = None) -> DataFrame:
    """The table's text events in (after, upto], backfill chunks reconciled in
    (`chunk_columns`: the column list every chunk has, if they all have the same)."""
    keys = shape.key_columns
    rows = _table_rows(run, table)
    new = rows.filter(is_within(F.col("commit_lsn"), F.col("change_index"), after, upto))
    events = changes_to_events(new, shape)
    if table.moved:  # else no update sent an old key: skip a second read of the rows
        events = expand_key_changes(events, keys)
    chunk_rows = _chunk_rows(run, table)
    if chunk_rows is None:
        return events
    history = _window_history(run, table)
    window_changes = (changes_to_events(history, shape)
                      .transform(lambda df: expand_key_changes(df, keys)))
    truncates = history.filter(F.col("op") == OP_TRUNCATE).select(
        F.col("commit_lsn").alias(LSN), F.col("change_index").alias(CHANGE_INDEX),
        F.col("xid").alias(XID))
    windows = run.spark.createDataFrame(window_rows(table.windows, run.generation_starts),
                                      WINDOW_SCHEMA)
    chunks = reconcile_chunks(snapshot_rows(with_chunk_columns(chunk_rows, chunk_columns), shape),
                              windows, window_changes, truncates, keys,
                              [c.name for c in shape.columns])
    return events.unionByName(chunks)


def _window_history(run: SilverContext, table: TableScan) -> DataFrame:
    """The table's bronze rows that may fall in the window of a chunk it applies."""
    newest_high = max(w.high for w in table.windows)
    return (_table_rows(run, table).filter(F.col("commit_lsn") <= F.lit(newest_high[0]))
            .filter(window_candidates(table.windows, run.generation_starts)))


def _toast_columns(run: SilverContext, table: TableScan, shape: TableShape) -> list[str] | None:
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
    snapshots = {w.snapshot for w in windows if w.snapshot is not None}
    if len(snapshots) > MAX_SNAPSHOT_TERMS:  # too long an expression: read all history
        return F.lit(True)
    if not snapshots:
        return after
    since = min(generation_start(generation_starts, w.low[0]) for w in windows)
    unseen = [invisible_to_snapshot(F.col("xid"), F.lit(snap.xmin), F.lit(snap.xmax),
                                    F.array(*(F.lit(x) for x in snap.xip))
                                    .cast(ArrayType(LongType())))
              for snap in sorted(snapshots, key=lambda snap: (snap.xmin, snap.xmax, snap.xip))]
    return after | ((F.col("commit_lsn") >= F.lit(since)) & _any(unseen))


def _any(terms: list[Column]) -> Column:
    """The OR of `terms` as a balanced tree. Spark Connect sends an expression as nested
    protobuf messages, and its decoder refuses them past a depth limit that a chain of 40
    ORs of snapshot tests already exceeds."""
    while len(terms) > 1:
        terms = [a | b for a, b in zip(terms[::2], terms[1::2])] + terms[len(terms) // 2 * 2:]
    return terms[0]


@dataclass(frozen=True)
class Applied:
    """What applying one table's batch changed beyond rows."""

    floor: Position | None  # the table's truncate floor now
    columns_added: tuple[str, ...] = ()
    columns_widened: tuple[str, ...] = ()


def apply_table(run: SilverContext, table: TableScan, before: TableProgress, upto: Position,
                newest_commit_micros: int | None, replace_tables: bool = False) -> Applied:
    """Apply one table's new bronze (after before.position, up to `upto`) to silver."""
    if table.shape_error or table.window_error:
        raise DataError(table.shape_error or table.window_error)
    floor = max(filter(None, [before.floor, table.truncate]), default=None)
    floor_moved = floor is not None and floor != before.floor
    shape = table.shape
    chunks = _chunk_shapes(run, table) if table.windows else ChunkShapes(None, None)
    if chunks.newest is not None:
        shape = merge_shapes(shape, chunks.newest) if shape else chunks.newest
    schema, name = table.name.split(".", 1)
    silver = run.names.silver(schema, name)
    marks = run.names.tombstones(schema, name)
    if shape is None:  # no row says what the table looks like: a bare truncate
        if floor_moved:
            for target in (silver, marks):
                _truncate(run, target, floor)
            if run.keeps_history(table.name):
                history_tables.close(run, table)
        return Applied(floor)
    keys = list(shape.key_columns)

    toast = _toast_columns(run, table, shape)
    batch = batch_events(run, table, shape, before.position, upto, chunks.same_columns)

    # Plan the schemas without touching a table: nothing changes before the check.
    batch_fields = [StructField(c.name, spark_type(c), True) for c in shape.columns]
    silver_exists = not replace_tables and run.exists(silver)
    target = (run.read(silver).schema if silver_exists
              else StructType(batch_fields + list(METADATA_FIELDS)))
    plan = plan_schema(shape.qualified_name, target, batch_fields)
    final = plan.final_schema(target)
    types = {f.name: f.dataType for f in final.fields}
    marks_exist = not replace_tables and run.exists(marks)
    if marks_exist:
        marked = run.read(marks).schema
        marked_keys = list(tombstone_keys(marked.names))
        if marked_keys != keys:
            raise DataError(f"{shape.qualified_name}: the primary key changed from "
                            f"{marked_keys} to {keys}; rebuild the table from bronze with "
                            f"`lakehouse silver --rebuild {shape.qualified_name}`")

    def typed(events: DataFrame) -> DataFrame:
        frame = typed_columns(with_failed_texts(events, shape.columns), shape.columns,
                              table=shape.qualified_name)
        return frame.select(*(col(n).cast(types[n]).alias(n) if n in types else col(n)
                              for n in frame.columns))

    old_key = [typed_value(SourceColumn(k, c.type_name, c.type_mod, True),
                           struct_field(F.col(OLD_KEY), k)).cast(types[k])
               for k in keys for c in shape.columns if c.name == k]
    every = None
    if run.keeps_history(table.name):
        # Every event of the batch, staged once: history needs them all, silver the newest.
        every = _staged_every(run, typed(filled_events(batch, shape, toast, table.moved)),
                              shape)
        check_failures(shape, failures_of(every, shape.columns))  # stops the table
        history_tables.tracked_columns(run, table, shape, [  # stops the table too
            f.name for f in final.fields if f.name not in keys and f.name not in METADATA])
        source = newest_events(every, shape, floor)
    else:
        source = typed(latest_events(batch, shape, floor, toast, moved_rows=table.moved))
    carried = [c.name for c in shape.columns]
    if table.moved and silver_exists:
        rows = run.read(silver)  # not widened yet: read as the final types
        rows = rows.select(*(col(n).cast(types[n]).alias(n) for n in rows.columns))
        source = fill_from_old_key_rows(source, rows, old_key, keys,
                                        [c for c in value_columns(shape) if c in target.names])
    # Staged once (Parquet): the check and both MERGE statements read plain files instead
    # of re-running the batch's plan, and see the same events (on Sail a MERGE whose
    # source is itself a join also runs markedly slower).
    staged = _staged(run, mark_stale_events(source, run.read(marks) if marks_exist else None,
                                            keys), shape)
    if every is None:  # else checked above, on every event
        check_failures(shape, failures_of(staged, shape.columns))  # stops the table

    if silver_exists:
        evolve(run, silver, target, plan)
    else:
        create_table(run, silver, target, replace_tables)
    if marks_exist:
        evolve(run, marks, marked,
                SchemaPlan(widen={k: v for k, v in plan.widen.items() if k in keys}))
    else:
        create_table(run, marks, StructType([StructField(k, types[k], True) for k in keys]
                                             + list(METADATA_FIELDS)), replace_tables)
    for target in (silver, marks):
        run.maintenance.prepare(run.spark, target, keys)

    bounds = key_range(staged, keys)
    staged.filter(~F.col(STALE)).select(
        *(col(n) for n in [*carried, LSN, CHANGE_INDEX, COMMIT_TS, OP, UNCHANGED])) \
        .createOrReplaceTempView(SOURCE_VIEW)
    run.spark.sql(silver_merge_sql(silver.sql, SOURCE_VIEW, keys, final.names, carried,
                                   floor if floor_moved else None, toast, bounds)).collect()

    staged.select(*(col(k) for k in keys), LSN, CHANGE_INDEX, COMMIT_TS, OP) \
        .createOrReplaceTempView(SOURCE_VIEW)
    expire = _expiry_horizon(run, marks, newest_commit_micros)
    run.spark.sql(tombstone_merge_sql(marks.sql, SOURCE_VIEW, keys,
                                      floor if floor_moved else None, expire, bounds)).collect()
    if every is not None:
        history_tables.apply(run, table, shape, every, before.position, final, old_key,
                             toast, replace_tables)
    run.maintenance.register(run.spark, schema, name, silver)
    if plan.new or plan.widen:
        log.info("silver %s: added columns %s, widened %s", shape.qualified_name,
                 [f.name for f in plan.new], sorted(plan.widen))
    return Applied(floor, tuple(f.name for f in plan.new), tuple(sorted(plan.widen)))


EXPIRE_EVERY = timedelta(hours=1)  # of bronze time: how often tombstones are expired
_expired_at: dict[str, int] = {}  # tombstone table -> bronze time of its last expiry here


def _expiry_horizon(run: SilverContext, marks: TableRef,
                    newest_commit_micros: int | None) -> int | None:
    """The retention horizon when this run should expire the table's tombstones, else None.

    Expiring makes the tombstone MERGE visit every row of the table (NOT MATCHED BY
    SOURCE), which no key range can narrow: once per EXPIRE_EVERY of bronze time in a
    process (and in its first run) is enough for a retention counted in hours.
    """
    if newest_commit_micros is None:
        return None
    last = _expired_at.get(marks.sql)
    every = EXPIRE_EVERY // timedelta(microseconds=1)
    if last is not None and newest_commit_micros - last < every:
        return None
    _expired_at[marks.sql] = newest_commit_micros
    return newest_commit_micros - run.retention // timedelta(microseconds=1)


def _truncate(run: SilverContext, target: TableRef, floor: Position) -> None:
    if run.exists(target):
        run.read(target).limit(0).createOrReplaceTempView(SOURCE_VIEW)
        run.spark.sql(floor_merge_sql(target.sql, SOURCE_VIEW, floor)).collect()


def _staged(run: SilverContext, frame: DataFrame, shape: TableShape) -> DataFrame:
    """Materialize the batch's typed events (Parquet, overwritten by the next run)."""
    return staged(run.spark, frame.drop(XID, OLD_KEY), run.lake.staging(shape.schema,
                                                                         shape.table))


def _staged_every(run: SilverContext, frame: DataFrame, shape: TableShape) -> DataFrame:
    """Materialize every typed event of the batch (history's input; overwritten by the
    next run). Old keys stay: a moved row's history continues its old key's."""
    return staged(run.spark, frame.drop(XID),
                  run.lake.history_staging(shape.schema, shape.table, "events"))


def create_table(run: SilverContext, table: TableRef, schema: StructType,
                 replace_table: bool) -> None:
    """Create an empty Delta table (or replace one, for a rebuild), with the table
    properties of silver's layout (deletion vectors: Maintenance.table_options)."""
    ensure_schema(run.spark, table)
    writer = (run.spark.createDataFrame([], schema).write.format("delta")
              .options(**run.maintenance.table_options()))
    if replace_table:
        writer = writer.mode("overwrite").option("overwriteSchema", "true")
    save_table(writer, table)


def evolve(run: SilverContext, table: TableRef, target: StructType, plan: SchemaPlan) -> None:
    """Widen columns (rewrite, values unchanged), then add new ones by MERGE WITH SCHEMA
    EVOLUTION of an empty source: the table's own statement on every engine."""
    if plan.widen:
        widened = run.read(table).select(*(col(f.name).cast(plan.widen[f.name]).alias(f.name)
                                           if f.name in plan.widen else col(f.name)
                                           for f in target.fields))
        save_table(widened.write.format("delta").mode("overwrite")
                   .option("overwriteSchema", "true"), table)
    if plan.new:
        run.spark.createDataFrame([], plan.final_schema(target)) \
            .createOrReplaceTempView(SOURCE_VIEW)
        with _auto_merge(run.spark):
            run.spark.sql(add_columns_merge_sql(table.sql, SOURCE_VIEW)).collect()


@contextmanager
def _auto_merge(spark: SparkSession) -> Iterator[None]:
    """Delta's autoMerge for one statement. delta-spark 4.0 ignores MERGE's WITH SCHEMA
    EVOLUTION clause and evolves a schema only with this setting; Sail honours only the
    clause (docs/architecture.md, rule 3): the statement carries both."""
    before = spark.conf.get(AUTO_MERGE, None)
    spark.conf.set(AUTO_MERGE, "true")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(AUTO_MERGE)
        else:
            spark.conf.set(AUTO_MERGE, before)

