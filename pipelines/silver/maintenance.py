"""The little table maintenance silver needs, behind one adapter per place it runs.

Sail has no Delta maintenance SQL and an in-memory catalog (docs/architecture.md portability rules
1 and 8), so on the local and spark engines silver tables (Delta paths in the lake) are
registered in the session catalog at the start of every run, and delta-rs trims their
logs, turns deletion vectors on for tables made without them and compacts their small
files. On Databricks silver tables are Unity Catalog managed tables (pipelines.catalog
names them): clustered by their key and compacted with Delta's own SQL.

Why compaction at all: with deletion vectors every MERGE adds a few small files (its
inserted and updated rows) instead of rewriting the files it touches, so a table applied
every second gains thousands of files an hour, and every read plans and opens each.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol, Sequence

from pyspark.sql import SparkSession

from pipelines.catalog import TableRef, silver_table_name, table_exists
from pipelines.config import Config, SilverConfig
from pipelines.lake import Lake, TableLocation, trim_log
from pipelines.names import quote, spark_string

if TYPE_CHECKING:
    from deltalake import DeltaTable, WriterProperties

log = logging.getLogger(__name__)
DELETION_VECTORS = "delta.enableDeletionVectors"  # the table property

CATALOG_DATABASE = "silver"
table_name = silver_table_name  # users, sales_orders: the name in a catalog


def catalog_name(schema: str, table: str) -> str:
    """The local session-catalog name of a silver table: silver.users."""
    return f"{CATALOG_DATABASE}.{quote(table_name(schema, table))}"


class Maintenance(Protocol):
    def register(self, spark: SparkSession, schema: str, table: str, silver: TableRef) -> None:
        """Make the silver table of schema.table queryable by name (a catalog table is)."""

    def register_all(self, spark: SparkSession, lake: Lake) -> list[str]:
        """Register every silver table of the lake: at session start."""

    def trim_log(self, table: TableRef) -> None:
        """Delete the table's expired Delta log files (see pipelines.lake.LOG_RETENTION)."""

    def prepare(self, spark: SparkSession, table: TableRef, keys: Sequence[str]) -> None:
        """Before the first MERGE of this process into the table: give it the layout new
        tables get (deletion vectors; clustering by key on Databricks), if it lacks it."""

    def compact(self, spark: SparkSession, table: TableRef) -> bool:
        """Compact the table's small files once there are silver.compact_files of them;
        True if it did (False too for a table that does not exist)."""

    def table_options(self) -> dict[str, str]:
        """The Delta writer options a new silver or history table is created with."""

    def rewrites(self, table: TableRef) -> bool:
        """Whether a classic driver's MERGE into the table rewrites the files it touches
        instead of giving them deletion vectors (silver.copy_on_write_mb)."""


class LocalMaintenance:
    """Tables registered in the session's in-memory catalog; logs trimmed, deletion
    vectors turned on and small files compacted by delta-rs (which applies deletion
    vectors when it rewrites a file)."""

    # (session, name) -> table registered, for as long as the process runs
    _registered: dict[tuple[int, str], TableLocation] = {}
    _prepared: set[TableLocation] = set()  # tables whose layout this process checked

    def __init__(self, settings: SilverConfig = SilverConfig()) -> None:
        self.settings = settings

    def register(self, spark: SparkSession, schema: str, table: str, silver: TableRef) -> None:
        # The catalog lives as long as the session: the name may still point at another
        # lake's table (tests, a changed config). Dropping an external table keeps its data.
        path = silver.path
        if path is None:
            return  # a catalog table is queryable by its own name
        name = catalog_name(schema, table)
        if self._registered.get((id(spark), name)) == path:
            return
        database = name.split(".", 1)[0]
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} USING delta LOCATION {spark_string(path.uri)}")
        self._registered[(id(spark), name)] = path

    def register_all(self, spark: SparkSession, lake: Lake) -> list[str]:
        names = []
        for schema in lake.children("silver"):
            for table in lake.delta_tables("silver", schema):
                self.register(spark, schema, table, TableRef(path=lake.silver(schema, table)))
                names.append(catalog_name(schema, table))
        return names

    def trim_log(self, table: TableRef) -> None:
        if table.path is not None:
            trim_log(table.path)

    def prepare(self, spark: SparkSession, table: TableRef, keys: Sequence[str]) -> None:
        path = table.path
        if path is None or path in self._prepared or not self.settings.deletion_vectors:
            return
        delta = path.open()
        if delta.metadata().configuration.get(DELETION_VECTORS) != "true":
            from deltalake import TableFeatures

            delta.alter.add_feature(TableFeatures.DeletionVectors,
                                    allow_protocol_versions_increase=True)
            delta.alter.set_table_properties({DELETION_VECTORS: "true"})
            log.info("silver %s: deletion vectors turned on", path)
        self._prepared.add(path)

    def compact(self, spark: SparkSession, table: TableRef) -> bool:
        from deltalake.exceptions import TableNotFoundError

        if table.path is None:
            return False
        # delta-rs rewrites every file below the target size: a target well below the
        # files a backfill or a bulk load writes leaves those alone, and bin-packs the
        # small files every MERGE adds into files that then stay as they are.
        target = self.settings.target_file_mb * 1024 * 1024
        try:
            delta = table.path.open()
        except TableNotFoundError:  # a run that only truncated wrote neither table
            return False
        sizes = delta.get_add_actions(flatten=True).column("size_bytes").to_pylist()
        small = sum(1 for size in sizes if size < target // 2)
        if small < self.settings.compact_files:
            return False
        try:
            metrics = delta.optimize.compact(target_size=target,
                                             writer_properties=_trusted_statistics(delta))
        except Exception:  # noqa: BLE001 - a table left uncompacted is only slower
            log.warning("could not compact %s", table.path, exc_info=True)
            return False
        log.info("silver %s: compacted %s small files into %s", table.path,
                 metrics["numFilesRemoved"], metrics["numFilesAdded"])
        return True

    def rewrites(self, table: TableRef) -> bool:
        # delta-spark's deletion-vector MERGE runs about 8 Spark jobs more than its
        # copy-on-write one (finding the touched rows, writing the bitmaps): a fixed toll
        # that on a small table costs more than rewriting the files (docs/silver.md).
        from deltalake.exceptions import TableNotFoundError

        limit = self.settings.copy_on_write_mb * 1024 * 1024
        if table.path is None or not limit:
            return False
        try:
            sizes = table.path.open().get_add_actions(flatten=True).column("size_bytes")
        except TableNotFoundError:
            return False
        return sum(sizes.to_pylist()) <= limit

    def table_options(self) -> dict[str, str]:
        # A MERGE then marks the rows it replaces instead of rewriting their files, so
        # its cost follows the batch (docs/silver.md, table layout).
        return {DELETION_VECTORS: "true"} if self.settings.deletion_vectors else {}


WIDE_DECIMAL_DIGITS = 18  # a decimal of more digits is not a 64-bit integer in Parquet


def _trusted_statistics(delta: DeltaTable) -> WriterProperties | None:
    """The writer settings of a compaction: no statistics for decimal columns of more
    than 18 digits (history's positions, wide numerics).

    delta-rs 1.6 turns such a column's Parquet statistics into the log's through a
    64-bit float and caps them at 2^63-1, so a compacted history file recorded a largest
    `_valid_to` below its rows' once positions passed 2^63 (an LSN past about 922 MB of
    WAL), and every engine skipped it for `_valid_to > x`: a point-in-time read lost
    versions. A file without those statistics is read, never skipped."""
    import pyarrow as pa
    from deltalake import ColumnProperties, WriterProperties

    wide = [f.name for f in pa.schema(delta.schema().to_arrow())
            if pa.types.is_decimal(f.type) and f.type.precision > WIDE_DECIMAL_DIGITS]
    if not wide:
        return None
    return WriterProperties(column_properties={
        name: ColumnProperties(statistics_enabled="NONE") for name in wide})


class DatabricksMaintenance:
    """The job cluster's session. Silver tables are Unity Catalog managed tables, created
    by the silver job under their names: nothing to register. They are clustered by
    their key (liquid clustering) and compacted by OPTIMIZE, which also clusters. The
    tombstone tables stay at lake paths (on the volume): delta-rs keeps them, as locally."""

    _prepared: set[str] = set()  # tables whose layout this process checked
    _merges: dict[str, int] = {}  # MERGE statements into each table since its OPTIMIZE

    def __init__(self, spark: SparkSession, settings: SilverConfig = SilverConfig()) -> None:
        self.spark = spark
        self.settings = settings
        self.lake_tables = LocalMaintenance(settings)

    def register(self, spark: SparkSession, schema: str, table: str, silver: TableRef) -> None:
        return None  # managed tables are queryable by name from their creation

    def register_all(self, spark: SparkSession, lake: Lake) -> list[str]:
        return []  # Unity Catalog persists

    def trim_log(self, table: TableRef) -> None:
        return None  # Databricks cleans up Delta logs itself, and lists them by offset

    def prepare(self, spark: SparkSession, table: TableRef, keys: Sequence[str]) -> None:
        if table.path is not None:
            return self.lake_tables.prepare(spark, table, keys)
        if table.sql in self._prepared:
            return None
        detail = spark.sql(f"DESCRIBE DETAIL {table.sql}").first()
        for statement in layout_statements(table.sql, keys, self.settings.deletion_vectors,
                                           detail["clusteringColumns"] or [],
                                           detail["properties"] or {}):
            spark.sql(statement).collect()
        self._prepared.add(table.sql)

    def compact(self, spark: SparkSession, table: TableRef) -> bool:
        # OPTIMIZE lists the table's files to decide; run it once per compact_files MERGE
        # statements, the most small files a table gains in between (one or two per MERGE).
        if table.path is not None:
            return self.lake_tables.compact(spark, table)
        merges = self._merges.get(table.sql, 0) + 1
        self._merges[table.sql] = merges % self.settings.compact_files
        if merges < self.settings.compact_files or not table_exists(spark, table):
            return False
        spark.sql(f"OPTIMIZE {table.sql}").collect()
        return True

    def table_options(self) -> dict[str, str]:
        return self.lake_tables.table_options()

    def rewrites(self, table: TableRef) -> bool:
        # a catalog table keeps Databricks' own choice (deletion vectors, for Photon)
        return self.lake_tables.rewrites(table)


def layout_statements(table: str, keys: Sequence[str], deletion_vectors: bool,
                      clustering: Sequence[str], properties: dict[str, str]) -> list[str]:
    """The statements that give a catalog table silver's layout, given what DESCRIBE
    DETAIL says it has: liquid clustering by the key, and deletion vectors (when
    silver.deletion_vectors is false the workspace's default stands)."""
    statements = []
    if list(clustering) != list(keys):
        statements.append(f"ALTER TABLE {table} CLUSTER BY "
                          f"({', '.join(quote(k) for k in keys)})")
    if deletion_vectors and properties.get(DELETION_VECTORS) != "true":
        statements.append(f"ALTER TABLE {table} SET TBLPROPERTIES ('{DELETION_VECTORS}' = true)")
    return statements


def maintenance_for(config: Config, spark: SparkSession) -> Maintenance:
    """The adapter for `config.engine`."""
    if config.engine == "databricks":
        return DatabricksMaintenance(spark, config.silver)
    return LocalMaintenance(config.silver)
