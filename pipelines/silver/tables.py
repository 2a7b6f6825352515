"""The table edge of a silver run: what every table's batch shares, and the few ways a
batch touches a Delta table other than by MERGE (create, evolve, truncate, stage).

Silver, tombstone and history tables are read, created and merged into through their
TableRef (pipelines.catalog): a Delta path locally, a Unity Catalog table on
Databricks; the statements are the same.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from pipelines.catalog import (
    TableNames, TableRef, ensure_schema, read_table, save_table, staged, table_exists)
from pipelines.lake import Lake, TableLocation
from pipelines.positions import Position
from pipelines.silver.events import CHANGE_INDEX, COMMIT_TS, LSN, OLD_KEY, XID, col
from pipelines.silver.evolution import SchemaPlan
from pipelines.silver.maintenance import Maintenance
from pipelines.silver.merge import add_columns_merge_sql, floor_merge_sql
from pipelines.silver.table_shape import TableShape

METADATA_FIELDS = (StructField(LSN, LongType()), StructField(CHANGE_INDEX, LongType()),
                   StructField(COMMIT_TS, TimestampType()))
SOURCE_VIEW = "_lakehouse_silver_events"
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

    def merge(self, statement: str, source: DataFrame) -> None:
        """Run a MERGE statement whose source is `source` (as SOURCE_VIEW)."""
        source.createOrReplaceTempView(SOURCE_VIEW)
        self.spark.sql(statement).collect()


def tombstones_path(lake: Lake, schema: str, table: str) -> TableLocation:
    """The sidecar Delta table of a silver table's tombstones (in the lake on every engine)."""
    return TableNames(lake).tombstones(schema, table).path


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
        empty = run.spark.createDataFrame([], plan.final_schema(target))
        with _auto_merge(run.spark):
            run.merge(add_columns_merge_sql(table.sql, SOURCE_VIEW), empty)


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


def truncate(run: SilverContext, target: TableRef, floor: Position) -> None:
    """Delete every row of the table at or below a truncate's floor (if it exists)."""
    if run.exists(target):
        run.merge(floor_merge_sql(target.sql, SOURCE_VIEW, floor), run.read(target).limit(0))


def oldest_commit_micros(table: TableRef) -> int | None:
    """A lower bound of the commit times of the table's rows (Unix microseconds), from
    its log's file statistics alone, with no Spark job: None when the table holds no
    file; 0 when the statistics do not say, or for a catalog table (delta-rs opens
    paths)."""
    if table.path is None:
        return 0
    actions = pa.table(table.path.open().get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return None
    least = f"min.{COMMIT_TS}"
    if least not in actions.column_names or actions.column(least).null_count:
        return 0
    column = actions.column(least)
    return pc.min(column.cast(pa.timestamp("us", column.type.tz))).cast(pa.int64()).as_py()


def stage_newest(run: SilverContext, frame: DataFrame, shape: TableShape) -> DataFrame:
    """Materialize the batch's typed newest events (Parquet, overwritten by the next run)."""
    return staged(run.spark, frame.drop(XID, OLD_KEY), run.lake.staging(shape.schema,
                                                                         shape.table))


def stage_every(run: SilverContext, frame: DataFrame, shape: TableShape) -> DataFrame:
    """Materialize every typed event of the batch (history's input; overwritten by the
    next run). Old keys stay: a moved row's history continues its old key's."""
    return staged(run.spark, frame.drop(XID),
                  run.lake.history_staging(shape.schema, shape.table, "events"))
