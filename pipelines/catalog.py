"""Where each Delta table of the pipeline lives and how Spark SQL names it: decided here only.

    table        engines local and spark                 engine databricks
    silver       delta.`<lake>/silver/<schema>/<table>`  `<catalog>`.`<silver_schema>`.`<name>`
    history      delta.`<lake>/silver_history/<schema>/<table>`
                                                         `<catalog>`.`<history_schema>`.`<name>`
    gold         delta.`<lake>/gold/<report>`            `<catalog>`.`<gold_schema>`.`<report>`
    tombstones   delta.`<lake>/_state/silver_tombstones/<schema>/<table>` on both
    bronze, state: paths under the lake on both (pipelines.lake)

On Databricks silver and gold are Unity Catalog managed tables: the lake path is a UC
volume (or external location) written by the ingest with delta-rs, and Unity Catalog
cannot register tables inside a volume. Tombstones are pipeline state, not for
analysts, so they stay with the progress table under the lake on every engine.

<name> is the source table's own name for schema public, else <schema>_<table>, in
lower case (Unity Catalog stores names in lower case) with the characters Unity Catalog
refuses even in backticks (. space / and control characters) replaced by `_`.

Every statement is the same text on every engine; only these identifiers differ. The
naming part of this module is pure; the I/O functions at the end are the only place
that reads, writes or looks up a table by its TableRef.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from pipelines.errors import ConfigError
from pipelines.lake import Lake, TableLocation
from pipelines.names import DEFAULT_SCHEMA, quote, split_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
    from pyspark.sql.types import StructType

    from pipelines.config import Config

_SIMPLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_REFUSED_BY_UNITY = re.compile(r"[./ \x00-\x1f\x7f]")  # not allowed even in backticks
_UNITY_MAX = 255


def delta_path(path: TableLocation | str) -> str:
    """A Delta table by path in Spark SQL: delta.`/lake/silver/public/users`,
    delta.`s3://bucket/lake/silver/public/users`."""
    return "delta." + quote(str(path))


def qualified(parts: Iterable[str]) -> str:
    """A multi-part name in Spark SQL, every part quoted: `main`.`lakehouse_silver`.`users`."""
    return ".".join(quote(p) for p in parts)


def readable(parts: Iterable[str]) -> str:
    """A multi-part name for people: parts quoted only when they need it."""
    return ".".join(p if _SIMPLE.match(p) else quote(p) for p in parts)


def silver_table_name(schema: str, table: str) -> str:
    """A silver table's name in a catalog: the table's own name for schema public,
    else <schema>_<table> (users, sales_orders)."""
    return table if schema == DEFAULT_SCHEMA else f"{schema}_{table}"


def catalog_silver_name(schema: str, table: str) -> str:
    """The name analysts give the silver table of source table schema.table in a catalog
    and in gold reports (users, sales_orders)."""
    return unity_table_name(silver_table_name(schema, table))


def unity_table_name(name: str) -> str:
    """`name` as Unity Catalog can hold it: lower case, refused characters as `_`."""
    return _REFUSED_BY_UNITY.sub("_", name).lower()


def check_unity_name(value: str, key: str) -> str:
    """`value` if Unity Catalog accepts it as a catalog or schema name, else ValueError."""
    if not value or len(value) > _UNITY_MAX or _REFUSED_BY_UNITY.search(value):
        raise ValueError(f"{key}: got {value!r}, expected a Unity Catalog name of 1 to "
                         f"{_UNITY_MAX} characters without '.', spaces, '/' or control "
                         "characters")
    return value


@dataclass(frozen=True)
class TableRef:
    """One Delta table, addressed by its path or by its catalog name (never both)."""

    path: TableLocation | None = None
    parts: tuple[str, ...] = ()  # catalog, schema, table

    def __post_init__(self) -> None:
        if (self.path is None) == (not self.parts):
            raise ValueError(f"a table has a path or a catalog name, got path={self.path!r} "
                             f"and parts={self.parts!r}")

    @property
    def sql(self) -> str:
        """The table in Spark SQL text (MERGE INTO <sql> ..., spark.table(<sql>))."""
        return delta_path(self.path) if self.path is not None else qualified(self.parts)

    @property
    def namespace(self) -> tuple[str, ...]:
        """The catalog and schema holding a catalog table; () for a path."""
        return self.parts[:-1]

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else readable(self.parts)


@dataclass(frozen=True)
class CatalogSchemas:
    """The catalog and schemas that hold silver and gold as catalog tables."""

    catalog: str
    silver: str
    gold: str
    history: str = "lakehouse_history"

    def __post_init__(self) -> None:
        for key, value in (("catalog", self.catalog), ("silver schema", self.silver),
                           ("gold schema", self.gold), ("history schema", self.history)):
            check_unity_name(value, key)


@dataclass(frozen=True)
class TableNames:
    """Every table's TableRef: by path under the lake, or silver and gold in `schemas`."""

    lake: Lake
    schemas: CatalogSchemas | None = None

    @classmethod
    def from_config(cls, config: "Config") -> "TableNames":
        """Paths for the local engines; Unity Catalog (config.databricks) for databricks."""
        lake = Lake.from_config(config)
        if config.engine != "databricks":
            return cls(lake)
        db = config.databricks
        try:
            for key in ("catalog", "silver_schema", "gold_schema", "history_schema"):
                check_unity_name(getattr(db, key), f"databricks.{key}")
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        return cls(lake, CatalogSchemas(db.catalog, db.silver_schema, db.gold_schema,
                                        db.history_schema))

    def silver(self, schema: str, table: str) -> TableRef:
        """The silver table of the source table schema.table."""
        if self.schemas is None:
            return TableRef(path=self.lake.silver(schema, table))
        name = catalog_silver_name(schema, table)
        return TableRef(parts=(self.schemas.catalog, self.schemas.silver, name))

    def history(self, schema: str, table: str) -> TableRef:
        """The silver table's history table (silver/history.py), named as silver is."""
        if self.schemas is None:
            return TableRef(path=self.lake.silver_history(schema, table))
        name = catalog_silver_name(schema, table)
        return TableRef(parts=(self.schemas.catalog, self.schemas.history, name))

    def tombstones(self, schema: str, table: str) -> TableRef:
        """The silver table's tombstones: pipeline state under the lake on every engine."""
        return TableRef(path=self.lake.tombstones(schema, table))

    def gold(self, report: str) -> TableRef:
        """The gold table of a report."""
        if self.schemas is None:
            return TableRef(path=self.lake.gold(report))
        return TableRef(parts=(self.schemas.catalog, self.schemas.gold, report))

    def silver_clashes(self, tables: Iterable[str]) -> dict[str, tuple[str, ...]]:
        """Source tables ("schema.table") whose silver table is another one's too (e.g.
        public.sales_orders and sales.orders, or Users and users, in a catalog): each
        such table -> the others. Paths never clash."""
        by_target: dict[str, list[str]] = {}
        for name in sorted(set(tables)):
            by_target.setdefault(self.silver(*split_table(name)).sql, []).append(name)
        return {name: tuple(n for n in group if n != name)
                for group in by_target.values() if len(group) > 1 for name in group}


def silver_names(lake: Lake, under: tuple[str, ...] = ("silver",)
                 ) -> dict[str, tuple[str, str]]:
    """The lake's silver tables (or those of another `<schema>/<table>` tree of the lake,
    such as their tombstones') by the name analysts use in a catalog (users,
    sales_orders) -> (schema, table). A name two tables would share is left out: silver
    refuses to build such a pair (TableNames.silver_clashes)."""
    names: dict[str, list[tuple[str, str]]] = {}
    for schema in lake.children(*under):
        for table in lake.delta_tables(*under, schema):
            names.setdefault(catalog_silver_name(schema, table), []).append((schema, table))
    return {name: pairs[0] for name, pairs in names.items() if len(pairs) == 1}


def create_schema_sql(table: TableRef) -> str:
    """The statement creating a catalog table's schema when it is missing."""
    if not table.namespace:
        raise ValueError(f"{table} is addressed by path: it has no schema to create")
    return f"CREATE SCHEMA IF NOT EXISTS {qualified(table.namespace)}"


# --- the edges: the only functions that touch a table through its TableRef ---------------

def read_table(spark: "SparkSession", table: TableRef) -> "DataFrame":
    """The table's current version as a DataFrame."""
    if table.path is not None:
        return spark.read.format("delta").load(table.path.uri)
    return spark.table(table.sql)


def table_schema(spark: "SparkSession", table: TableRef) -> "StructType":
    """The table's schema: from its Delta log for a path (delta-rs writes the schema in
    Spark's own JSON form; no Spark job), from the session catalog for a name."""
    if table.path is None:
        return spark.table(table.sql).schema
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(table.path.open().schema().to_json()))


def save_table(writer: "DataFrameWriter", table: TableRef) -> None:
    """Run a configured Delta writer (mode, options) into the table: save or saveAsTable."""
    if table.path is not None:
        writer.save(table.path.uri)
    else:
        writer.saveAsTable(table.sql)


def table_exists(spark: "SparkSession", table: TableRef) -> bool:
    """Whether the table exists: the lake answers for a path (pipelines.lake), the
    session catalog for a name."""
    if table.path is not None:
        return table.path.exists()
    return spark.catalog.tableExists(table.sql)


def staged(spark: "SparkSession", frame: "DataFrame", where: TableLocation,
           small: bool = False) -> "DataFrame":
    """`frame` materialized as Parquet at `where` (overwritten by the next use) and read
    back: the steps after it read plain files instead of running `frame`'s plan again,
    and all see the same rows. small: the caller knows `frame` holds few rows; the
    driver holds them instead (local_frames.held_frame) and `where` is left alone."""
    if small:
        from pipelines.local_frames import held_frame

        return held_frame(spark, frame)
    frame.write.mode("overwrite").parquet(where.uri)
    return spark.read.schema(frame.schema).parquet(where.uri)


def ensure_schema(spark: "SparkSession", table: TableRef) -> None:
    """Create a catalog table's schema if it is missing (nothing to do for a path).
    Looked up first: a job allowed to use an existing schema need not be allowed to
    create one."""
    if table.namespace and not spark.catalog.databaseExists(qualified(table.namespace)):
        spark.sql(create_schema_sql(table))
