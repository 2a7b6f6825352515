"""The table edge of a silver run: what every table's batch shares, and the few ways a
batch touches a Delta table other than by its MERGE (create, append, evolve, delete
where, stage).

Silver, tombstone and history tables are read, created and merged into through their
TableRef (pipelines.catalog): a Delta path locally, a Unity Catalog table on
Databricks; the statements are the same.
"""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any, Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from pipelines.bronze.schema import CHANGES_SCHEMA
from pipelines.catalog import (
    TableNames, TableRef, ensure_schema, read_table, save_table, staged, table_exists,
    table_schema)
from pipelines.lake import Lake, TableLocation, statistic, statistics_bound
from pipelines.local_frames import local_frame
from pipelines.positions import Position
from pipelines.silver.events import CHANGE_INDEX, COMMIT_TS, LSN, OLD_KEY, XID, col
from pipelines.silver.evolution import SchemaPlan
from pipelines.silver.key_ranges import Reach
from pipelines.silver.maintenance import Maintenance
from pipelines.silver.merge import (
    add_columns_merge_sql, at_or_below, delete_where_sql, proven_unique)
from pipelines.silver.merge_modes import PERSISTENT_DELETION_VECTORS, MergeModes
from pipelines.silver.table_shape import TableShape
from pipelines.spark_jobs import is_classic

METADATA_FIELDS = (StructField(LSN, LongType()), StructField(CHANGE_INDEX, LongType()),
                   StructField(COMMIT_TS, TimestampType()))
AUTO_MERGE = "spark.databricks.delta.schema.autoMerge.enabled"
# A session-wide setting: a run's tables, applied at once, take turns with it.
_AUTO_MERGE_LOCK = threading.Lock()


@dataclass
class SilverContext:
    """What every table's batch of one run shares."""

    spark: SparkSession
    lake: Lake
    maintenance: Maintenance
    retention: timedelta
    names: TableNames
    generation_starts: Sequence[int] = ()  # pipelines.bronze.generations
    history: Callable[[str], tuple[str, ...] | None] | None = None  # table -> tracked columns

    @cached_property
    def changes(self) -> DataFrame:
        """bronze/changes as a Delta table, read only by the steps that need all of it
        (a classic driver builds the table's snapshot in a Spark job of its own)."""
        return read_table(self.spark, TableRef(path=self.lake.bronze_changes))

    def keeps_history(self, table: str) -> bool:
        """Whether schema.table has a history table (silver.history)."""
        return self.history is not None and self.history(table) is not None

    def exists(self, table: TableRef) -> bool:
        """Whether the silver or tombstone table exists yet."""
        return table_exists(self.spark, table)

    def read(self, table: TableRef) -> DataFrame:
        """The table's current version."""
        return read_table(self.spark, table)

    def bronze_files(self, files: Sequence[str], schema: pa.Schema = CHANGES_SCHEMA
                     ) -> DataFrame:
        """These data files of a bronze table (`schema`: bronze/changes' or
        bronze/snapshots'), read as Parquet: bronze has no partitions and no deletion
        vectors, so its files are its rows, chosen from its log by delta-rs
        (lake.data_files); the engine builds no Delta snapshot of a table another writer
        commits to every second, and a classic driver runs no job to filter its files
        (past 32 paths it lists them in one, spark.sql.sources.parallelPartitionDiscovery)."""
        spark_schema = from_arrow_schema(schema)
        if not files:
            return local_frame(self.spark, [], spark_schema)
        return self.spark.read.schema(spark_schema).parquet(*files)

    def schema(self, table: TableRef) -> StructType:
        """The table's current schema (from its log for a path: no Spark job)."""
        return table_schema(self.spark, table)

    def modify(self, target: TableRef, statement: Callable[[str | None], str]) -> None:
        """Run the DELETE or UPDATE `statement` writes (merge.delete_where_sql,
        update_where_sql): given None, Delta's own statement, which classic Spark and
        Databricks run; given a view name, its MERGE form, with an empty relation of the
        target as that view, for Spark Connect, whose server may be Sail's (neither
        statement for Delta tables: docs/architecture.md, rule 15)."""
        if is_classic(self.spark):
            self.spark.sql(statement(None)).collect()
        else:
            self.merge(target, statement, self.read(target).limit(0))

    def unique_source(self, rows: DataFrame, keys: Sequence[str]) -> DataFrame:
        """A MERGE source that holds one row per `keys` already, in the form its engine
        prunes the target by: through Spark Connect an aggregate grouped by those keys
        (merge.proven_unique: Sail then pushes the ON clause's key range into its scan);
        on a classic driver the rows as they are (delta-spark prunes by the literals
        either way, and the aggregate would cost it a shuffle)."""
        return rows if is_classic(self.spark) else proven_unique(rows, keys)

    def merge(self, target: TableRef, statement: Callable[[str], str],
              source: DataFrame) -> None:
        """Run the MERGE statement into `target` that `statement` writes for a source
        view name, with `source` as that view (source_view); on a classic driver, by
        rewriting the files it touches if the table is small (Maintenance.rewrites)."""
        modes = self.merge_modes
        with nullcontext() if modes is None else \
                modes.writing(not self.maintenance.rewrites(target)):
            self.query(target, statement, source).collect()

    @cached_property
    def merge_modes(self) -> MergeModes | None:
        """A classic driver's MERGE modes; None on Spark Connect, or where the session's
        own config sets the mode (spark.conf), which then stands."""
        if not is_classic(self.spark) or \
                self.spark.conf.get(PERSISTENT_DELETION_VECTORS, None) is not None:
            return None
        return MergeModes(self.spark.conf)

    def query(self, target: TableRef, select: Callable[[str], str],
              source: DataFrame) -> DataFrame:
        """The SQL `select` writes for a source view name, over `source` as that view,
        to be used before the next statement into `target` replaces the view (a Spark
        Connect plan names the view until it runs)."""
        view = source_view(target)
        source.createOrReplaceTempView(view)
        return self.spark.sql(select(view))


def source_view(target: TableRef) -> str:
    """The temporary view a statement into `target` reads its source from: one per
    target, so that the tables of a run, applied at once (silver.parallel_tables), never
    replace each other's, and a target's next batch replaces its own."""
    return f"_lakehouse_source_{hashlib.sha1(target.sql.encode()).hexdigest()[:16]}"


def tombstones_path(lake: Lake, schema: str, table: str) -> TableLocation:
    """The sidecar Delta table of a silver table's tombstones (in the lake on every engine)."""
    return TableNames(lake).tombstones(schema, table).path


def create_table(run: SilverContext, table: TableRef, schema: StructType,
                 replace_table: bool, rows: DataFrame | None = None) -> None:
    """Create a Delta table (or replace one, for a rebuild) holding `rows` (cast to
    `schema`; none: empty), with the table properties of silver's layout (deletion
    vectors: Maintenance.table_options)."""
    ensure_schema(run.spark, table)
    rows = local_frame(run.spark, [], schema) if rows is None else conformed(rows, schema)
    writer = rows.write.format("delta").options(**run.maintenance.table_options())
    if replace_table:
        writer = writer.mode("overwrite").option("overwriteSchema", "true")
    save_table(writer, table)


def conformed(rows: DataFrame, schema: StructType) -> DataFrame:
    """`rows` as the columns of `schema`, in its order, each cast to its type."""
    return rows.select(*(col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields))


def write_tombstones(table: TableRef, schema: StructType, rows: DataFrame | None, *,
                     create: bool, replace_table: bool = False) -> None:
    """Append a batch's deletes (`rows`, of `schema`; None: it has none) to a tombstone
    table, or create the table holding them (or replace one, for a rebuild), through
    delta-rs on every engine: the rows come to the driver in one Spark job, and the
    commit costs none (on a classic driver Delta's own write costs a job, a commit and
    a snapshot, 0.4 s for a new table, about 1.4 s for an append of 10k deletes on 2
    cores). A log of deletes is only appended to and deleted from, never merged into: a
    new one keeps the state tables' protocol, without deletion vectors
    (docs/architecture.md, tables that work everywhere)."""
    assert table.path is not None, "tombstones live at lake paths on every engine"
    if rows is None and not create:
        return
    arrow = to_arrow_schema(schema)
    data = arrow.empty_table() if rows is None else rows.toArrow().cast(arrow)
    where = table.path
    if create:
        write_deltalake(where.uri, data, mode="overwrite" if replace_table else "error",
                        schema_mode="overwrite" if replace_table else None,
                        configuration=where.retention_properties,
                        storage_options=where.delta_options)
    elif data.num_rows:
        target = where.open()
        write_deltalake(target, data.cast(pa.schema(target.schema().to_arrow())),
                        mode="append")


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
        empty = local_frame(run.spark, [], plan.final_schema(target))
        with _auto_merge(run.spark):
            run.merge(table, lambda view: add_columns_merge_sql(table.sql, view), empty)


@contextmanager
def _auto_merge(spark: SparkSession) -> Iterator[None]:
    """Delta's autoMerge for one statement. delta-spark 4.0 ignores MERGE's WITH SCHEMA
    EVOLUTION clause and evolves a schema only with this setting; Sail honours only the
    clause (docs/architecture.md, rule 3): the statement carries both."""
    with _AUTO_MERGE_LOCK:
        before = spark.conf.get(AUTO_MERGE, None)
        spark.conf.set(AUTO_MERGE, "true")
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(AUTO_MERGE)
            else:
                spark.conf.set(AUTO_MERGE, before)


def truncate(run: SilverContext, target: TableRef, floor: Position) -> None:
    """Delete every row of the table at or below a truncate's floor (if it exists)."""
    if run.exists(target):
        delete_where(run, target, at_or_below(floor))


def delete_where(run: SilverContext, target: TableRef, condition: str) -> None:
    """Delete the rows of an existing table that meet `condition` (SQL on `t`)."""
    run.modify(target, lambda view: delete_where_sql(target.sql, condition, view))


@dataclass(frozen=True)
class MarkBounds:
    """What a tombstone table's log says of its rows, from its files' statistics alone
    (no Spark job): bounds, not values."""

    oldest_micros: int  # no commit time is older (Unix microseconds; 0: unknown)
    newest_lsn: int  # no position's LSN is higher (UNKNOWN_LSN: unknown)


UNKNOWN_LSN = 2 ** 63 - 1


def tombstone_bounds(table: TableRef) -> MarkBounds | None:
    """The bounds of a tombstone table's rows (always a lake path); None when it holds
    no file."""
    assert table.path is not None, "tombstones live at lake paths on every engine"
    actions = pa.table(table.path.open().get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return None
    oldest = statistics_bound(actions, f"min.{COMMIT_TS}", pc.min)
    newest = statistics_bound(actions, f"max.{LSN}", pc.max)
    return MarkBounds(0 if oldest is None else oldest,
                      UNKNOWN_LSN if newest is None else newest)


# the share of a table's rows a key range must let an engine skip to be worth its test
WORTH_SKIPPING = 0.1


def file_statistics(table: TableRef) -> pa.Table | None:
    """The table's files and their statistics, from its log by delta-rs (no Spark job);
    None for a catalog table, whose log the pipeline does not read."""
    return None if table.path is None else pa.table(
        table.path.open().get_add_actions(flatten=True))


def holds_none_of(files: pa.Table | None, bounds: Mapping[str, tuple[Any, Any]]) -> bool:
    """Whether a table (`files`: file_statistics) can hold none of a batch's keys: the
    batch's values of some integer key column (`bounds`: least and greatest,
    key_ranges.Ranged.bounds) lie outside the range its files' statistics give that
    column. A backfill's chunks come in key order, so each slice of a first load holds
    keys above the table's. False where the log cannot say (a catalog table, no
    statistics)."""
    if files is None or not bounds:
        return False
    if files.num_rows == 0:
        return True
    for key, (low, high) in bounds.items():
        if not isinstance(low, int):  # integers only: string statistics may be cut
            continue
        least = statistics_bound(files, f"min.{key}", pc.min)
        greatest = statistics_bound(files, f"max.{key}", pc.max)
        if least is not None and greatest is not None and (high < least or low > greatest):
            return True
    return False


def skips_files(files: pa.Table | None, reach: Reach | None) -> bool:
    """Whether a batch's key range (`reach`) lets an engine skip enough of the table
    (`files`: file_statistics): files outside every range holding at least
    WORTH_SKIPPING of its rows. Otherwise the range only costs its test of every row
    (keys changed all over a 50M-row table: about a sixth of Sail's MERGE), more than
    skipping a few small files saves. True where the log cannot say."""
    if files is None or reach is None or f"min.{reach.key}" not in files.column_names:
        return True
    lows, highs = statistic(files, f"min.{reach.key}"), statistic(files, f"max.{reach.key}")
    rows = files.column("num_records").to_pylist()
    skipped = sum(n or 0 for low, high, n in zip(lows, highs, rows)
                  if low is not None and high is not None and reach.misses(low, high))
    return skipped >= WORTH_SKIPPING * sum(n or 0 for n in rows)


def stage_newest(run: SilverContext, frame: DataFrame, shape: TableShape,
                 small: bool, one_pass: bool = False) -> DataFrame:
    """Materialize the batch's typed newest events (Parquet, overwritten by the next run;
    held by the driver for a small batch: TableScan.small).

    one_pass: the frame is one pass over staged events that joins no other rows. Sail
    computes it where its MERGE statements read it for less than staging it again;
    delta-spark's MERGE reads its source twice (materializeSource none), so only a
    classic driver stages it."""
    frame = frame.drop(XID, OLD_KEY)
    if one_pass and not is_classic(run.spark):
        return frame
    return staged(run.spark, frame, run.lake.staging(shape.schema, shape.table), small)


def stage_every(run: SilverContext, frame: DataFrame, shape: TableShape,
                small: bool) -> DataFrame:
    """Materialize every typed event of the batch (history's input; overwritten by the
    next run; held by the driver for a small batch). Old keys stay: a moved row's
    history continues its old key's."""
    return staged(run.spark, frame.drop(XID),
                  run.lake.history_staging(shape.schema, shape.table, "events"), small)
