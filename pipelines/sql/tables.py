"""The lake's silver and gold tables under analysts' names, registered in a Spark session.

On Databricks silver, history and gold are Unity Catalog tables already:
`<catalog>.<schema>.<name>`. Elsewhere they are Delta tables under the lake, and this
module gives each the same name less the catalog (pipelines.catalog's rule:
`lakehouse_silver.users`, `lakehouse_history.users`,
`lakehouse_gold.hours_per_project_per_day`) as an external table of the session catalog.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipelines.catalog import qualified, readable, silver_names
from pipelines.engine import query_errors
from pipelines.lake import Lake, TableLocation
from pipelines.names import spark_string

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.config import Config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AnalystTable:
    """One table as analysts name it, and where its Delta table is."""

    parts: tuple[str, ...]  # schema, name
    location: TableLocation

    @property
    def name(self) -> str:
        return readable(self.parts)


def lake_tables(config: "Config") -> list[AnalystTable]:
    """Every silver and gold table the lake holds now, by its analysts' name."""
    lake = Lake.from_config(config)
    db = config.databricks
    tables = [AnalystTable((db.silver_schema, name), lake.silver(*table))
              for name, table in silver_names(lake).items()]
    tables += [AnalystTable((db.history_schema, name), lake.silver_history(*table))
               for name, table in silver_names(lake, under=("silver_history",)).items()]
    tables += [AnalystTable((db.gold_schema, report), lake.gold(report))
               for report in lake.delta_tables("gold")]
    return tables


def register(spark: "SparkSession", tables: list[AnalystTable]) -> list[AnalystTable]:
    """Create each table's schema and external table in the session catalog where
    missing; returns the tables it added (the catalog may hold them already: a served
    session's catalog lives on). A table the engine cannot open (a damaged log, say) is
    left out with a warning, so the others stay queryable."""
    known: dict[tuple[str, ...], set[str]] = {}
    added = []
    for table in tables:
        schema, name = table.parts[:-1], table.parts[-1]
        if schema not in known:
            spark.sql(f"CREATE SCHEMA IF NOT EXISTS {qualified(schema)}")
            known[schema] = {row.tableName for row in
                             spark.sql(f"SHOW TABLES IN {qualified(schema)}").collect()}
        if name in known[schema]:
            continue
        try:
            spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified(table.parts)} USING delta "
                      f"LOCATION {spark_string(table.location.uri)}")
        except query_errors() as exc:
            log.warning("%s is left out: the engine cannot open %s: %s", table.name,
                        table.location, str(exc).strip().splitlines()[0][:300])
            continue
        added.append(table)
    log.debug("registered %d table(s): %s", len(added), ", ".join(t.name for t in added))
    return added
