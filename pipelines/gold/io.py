"""The edges of the gold job: the tables a report reads, in as temp views; reports out.

Everything else in pipelines.gold is SQL text or DataFrame -> DataFrame. `TableGoldIO`
finds tables where pipelines.catalog puts them: Delta paths under the lake on the local
engines, Unity Catalog tables on Databricks (`spark.table`, `saveAsTable`). A report's
SQL names tables as analysts do (`lakehouse_silver.users`); each name becomes a temp
view of the table it means (`_lh_silver__users__for__<report>`), so the same text runs on
every engine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from pyspark.sql import DataFrame, SparkSession

from pipelines.catalog import (TableNames, TableRef, ensure_schema, read_table, save_table,
                               silver_names, table_exists)
from pipelines.gold.silver_facts import row_count
from pipelines.lake import Lake, trim_log

if TYPE_CHECKING:
    from pipelines.config import Config
    from pipelines.gold.definitions import Report

log = logging.getLogger(__name__)


class GoldIO(Protocol):
    """Where a report's tables are read from and its own table is written to."""

    @property
    def lake(self) -> Lake:
        """The lake that holds gold's own state (pipelines/gold/state.py)."""

    def silver_table(self, name: str) -> TableRef | None:
        """The silver table analysts call `<silver_schema>.<name>`; None when missing."""

    def tombstones(self, name: str) -> TableRef | None:
        """That silver table's tombstones (its deleted keys); None when missing."""

    def report_location(self, report: str) -> str:
        """The gold table's name or path."""

    def report_exists(self, report: str) -> bool:
        """Whether the gold table exists."""

    def write_report(self, df: DataFrame, report: str) -> None:
        """Replace the gold table with `df` (one Delta commit)."""

    def replace_groups(self, df: DataFrame, report: str, where: str) -> None:
        """Replace the gold table's rows for which `where` (SQL over its columns) holds
        with `df`, in one Delta commit."""

    def read_report(self, spark: SparkSession, report: str) -> DataFrame:
        """The gold table as a DataFrame."""

    def report_rows(self, report: str) -> int:
        """The gold table's rows (no Spark job at a lake path)."""


@dataclass(frozen=True)
class TableGoldIO:
    """Silver and gold wherever `names` puts them: Delta paths under the lake, or catalog
    tables (Unity Catalog on Databricks; the gold schema is created when missing)."""

    spark: SparkSession
    names: TableNames

    @property
    def lake(self) -> Lake:
        return self.names.lake

    def silver_table(self, name: str) -> TableRef | None:
        if self.names.schemas is not None:  # a catalog table has the analysts' name
            schemas = self.names.schemas
            table = TableRef(parts=(schemas.catalog, schemas.silver, name))
            return table if table_exists(self.spark, table) else None
        found = self._lake_silver.get(name)
        return None if found is None else self.names.silver(*found)

    @cached_property
    def _lake_silver(self) -> dict[str, tuple[str, str]]:
        # listed once per TableGoldIO (a gold run): a store's listing is a request per schema
        return silver_names(self.names.lake)

    def tombstones(self, name: str) -> TableRef | None:
        # at lake paths on every engine, also where silver is a catalog table
        found = self._lake_tombstones.get(name)
        return None if found is None else self.names.tombstones(*found)

    @cached_property
    def _lake_tombstones(self) -> dict[str, tuple[str, str]]:
        return silver_names(self.names.lake, ("_state", "silver_tombstones"))

    def report_location(self, report: str) -> str:
        return str(self.names.gold(report))

    def report_exists(self, report: str) -> bool:
        return table_exists(self.spark, self.names.gold(report))

    def write_report(self, df: DataFrame, report: str) -> None:
        # overwriteSchema: a report whose columns changed replaces the old table; on a
        # catalog table this is one Delta commit that keeps the table and its history
        target = self.names.gold(report)
        ensure_schema(self.spark, target)
        save_table(df.write.format("delta").mode("overwrite").option("overwriteSchema", "true"),
                   target)
        if target.path is not None:  # a catalog table's log is the catalog's business
            trim_log(target.path)

    def replace_groups(self, df: DataFrame, report: str, where: str) -> None:
        # Delta's selective overwrite: one commit deletes the rows `where` holds for and
        # adds df's, rewriting only the files that may hold such rows (their statistics)
        target = self.names.gold(report)
        save_table(df.write.format("delta").mode("overwrite").option("replaceWhere", where),
                   target)
        if target.path is not None:
            trim_log(target.path)

    def read_report(self, spark: SparkSession, report: str) -> DataFrame:
        return read_table(spark, self.names.gold(report))

    def report_rows(self, report: str) -> int:
        return row_count(self.spark, self.names.gold(report))


def gold_io_for(config: "Config", spark: SparkSession) -> TableGoldIO:
    """The GoldIO of `config`'s engine (names from pipelines.catalog)."""
    return TableGoldIO(spark, TableNames.from_config(config))


def view_name(schema_kind: str, name: str, reader: str | None = None) -> str:
    """The temp view standing for a silver table or report in a report's SQL; named for
    the `reader` report too, since reports refreshed at once each point their views at
    rows of their own (an incremental refresh, at the touched groups')."""
    return f"_lh_{schema_kind}__{name}" + ("" if reader is None else f"__for__{reader}")


def register_inputs(spark: SparkSession, io: GoldIO, report: "Report"
                    ) -> tuple[dict[tuple[str, str], str], list[str]]:
    """A temp view for each table `report` reads. Returns the name -> view map for
    Report.rewritten, and the tables that are missing, as the SQL names them; when one
    is missing, nothing is registered."""
    frames: dict[tuple[str, str], tuple[str, DataFrame]] = {}
    missing: list[str] = []
    for table in {t.parts: t for t in report.tables}.values():
        if table.kind == "silver":
            ref = io.silver_table(table.name)
            df = None if ref is None else read_table(spark, ref)
        else:
            df = io.read_report(spark, table.name) if io.report_exists(table.name) else None
        if df is None:
            missing.append(str(table))
        else:
            frames[table.parts] = (view_name(table.kind, table.name, report.name), df)
    if missing:
        return {}, missing
    for view, df in frames.values():
        df.createOrReplaceTempView(view)
        log.debug("view %s for gold %s", view, report.name)
    return {parts: view for parts, (view, _) in frames.items()}, []
