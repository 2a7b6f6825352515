"""The edges of the gold job: silver tables in as temp views, report tables out.

Everything else in pipelines.gold is SQL text or DataFrame -> DataFrame. `TableGoldIO`
reads and writes the tables where pipelines.catalog puts them: Delta paths under the
lake on the local engines, Unity Catalog tables on Databricks (`spark.table`,
`saveAsTable`). The report SQL stays the same because it only names views.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol

from pyspark.sql import DataFrame, SparkSession

from pipelines.catalog import TableNames, ensure_schema, read_table, save_table, table_exists
from pipelines.gold.reports import SILVER_SCHEMA
from pipelines.lake import trim_log

if TYPE_CHECKING:
    from pipelines.config import Config

log = logging.getLogger(__name__)


class GoldIO(Protocol):
    """Where silver is read from and gold is written to."""

    def silver_location(self, table: str) -> str:
        """The silver table's name or path, for messages."""

    def silver_exists(self, table: str) -> bool:
        """Whether the silver table exists."""

    def read_silver(self, spark: SparkSession, table: str) -> DataFrame:
        """The silver table as a DataFrame."""

    def report_location(self, report: str) -> str:
        """The gold table's name or path."""

    def report_exists(self, report: str) -> bool:
        """Whether the gold table exists."""

    def write_report(self, df: DataFrame, report: str) -> None:
        """Replace the gold table with `df` (one Delta commit)."""

    def read_report(self, spark: SparkSession, report: str) -> DataFrame:
        """The gold table as a DataFrame."""


@dataclass(frozen=True)
class TableGoldIO:
    """Silver and gold wherever `names` puts them: Delta paths under the lake, or catalog
    tables (Unity Catalog on Databricks; the gold schema is created when missing)."""

    spark: SparkSession
    names: TableNames
    schema: str = SILVER_SCHEMA

    def silver_location(self, table: str) -> str:
        return str(self.names.silver(self.schema, table))

    def silver_exists(self, table: str) -> bool:
        return table_exists(self.spark, self.names.silver(self.schema, table))

    def read_silver(self, spark: SparkSession, table: str) -> DataFrame:
        return read_table(spark, self.names.silver(self.schema, table))

    def report_location(self, report: str) -> str:
        return str(self.names.gold(report))

    def report_exists(self, report: str) -> bool:
        return table_exists(self.spark, self.names.gold(report))

    def write_report(self, df: DataFrame, report: str) -> None:
        # overwriteSchema: a report whose declared schema changed replaces the old table;
        # on a catalog table this is one Delta commit that keeps the table and its history
        target = self.names.gold(report)
        ensure_schema(self.spark, target)
        save_table(df.write.format("delta").mode("overwrite").option("overwriteSchema", "true"),
                   target)
        if target.path is not None:  # a catalog table's log is the catalog's business
            trim_log(target.path)

    def read_report(self, spark: SparkSession, report: str) -> DataFrame:
        return read_table(spark, self.names.gold(report))


def gold_io_for(config: "Config", spark: SparkSession) -> TableGoldIO:
    """The GoldIO of `config`'s engine (names from pipelines.catalog)."""
    return TableGoldIO(spark, TableNames.from_config(config))


def register_silver_views(spark: SparkSession, io: GoldIO,
                          tables: Iterable[str]) -> tuple[str, ...]:
    """Register each existing silver table as a temp view of its own name; return the missing."""
    missing = []
    for table in tables:
        if not io.silver_exists(table):
            missing.append(table)
            continue
        io.read_silver(spark, table).createOrReplaceTempView(table)
        log.debug("view %s -> %s", table, io.silver_location(table))
    return tuple(missing)
