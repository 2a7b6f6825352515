"""The little table maintenance silver needs, behind one adapter per place it runs.

Sail has no Delta maintenance SQL and an in-memory catalog (docs/architecture.md portability rules
1 and 8), so on the local and spark engines silver tables (Delta paths in the lake) are
registered in the session catalog at the start of every run and delta-rs trims their
logs; on Databricks silver tables need neither: they are Unity Catalog managed tables
from the start (pipelines.catalog names them).
"""

from __future__ import annotations

from typing import Protocol

from pyspark.sql import SparkSession

from pipelines.catalog import TableRef, quote, silver_table_name
from pipelines.config import Config
from pipelines.lake import Lake, TableLocation, trim_log

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


class LocalMaintenance:
    """Tables registered in the session's in-memory catalog; logs trimmed by delta-rs."""

    # (session, name) -> table registered, for as long as the process runs
    _registered: dict[tuple[int, str], TableLocation] = {}

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
        location = path.uri.replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"DROP TABLE IF EXISTS {name}")
        spark.sql(f"CREATE TABLE {name} USING delta LOCATION '{location}'")
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


class DatabricksMaintenance:
    """The job cluster's session. Silver tables are Unity Catalog managed tables, created
    by the silver job under their names: nothing to register."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def register(self, spark: SparkSession, schema: str, table: str, silver: TableRef) -> None:
        return None  # managed tables are queryable by name from their creation

    def register_all(self, spark: SparkSession, lake: Lake) -> list[str]:
        return []  # Unity Catalog persists

    def trim_log(self, table: TableRef) -> None:
        return None  # Databricks cleans up Delta logs itself, and lists them by offset


def maintenance_for(config: Config, spark: SparkSession) -> Maintenance:
    """The adapter for `config.engine`."""
    if config.engine == "databricks":
        return DatabricksMaintenance(spark)
    return LocalMaintenance()
