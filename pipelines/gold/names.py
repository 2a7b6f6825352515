"""The tables a gold report reads, as its SQL names them (`lakehouse_silver.users`).

sqlglot (Spark dialect) finds the names and their spans in the report's own text; the
definitions check a report with them and the grouping traces a column back to one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp

from pipelines.errors import ConfigError

_WRITES = (exp.Insert, exp.Create, exp.Drop, exp.Merge, exp.Update, exp.Delete, exp.Command)


@dataclass(frozen=True)
class TableName:
    """A table a report reads, as written in its SQL: `lakehouse_silver.users`."""

    kind: str  # "silver" or "gold"
    schema: str  # lower case
    name: str  # lower case
    start: int  # its span in the report's SQL, end exclusive
    end: int
    aliased: bool  # the SQL gives it an alias (else the view is aliased to its own name)

    @property
    def parts(self) -> tuple[str, str]:
        return self.schema, self.name

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


def table_names(sql: str, path: Path, silver_schema: str,
                gold_schema: str) -> tuple[TableName, ...]:
    """The silver and gold tables `sql` names, with their spans; ConfigError for anything
    else than one query over such names."""
    try:
        statements = [s for s in sqlglot.parse(sql, dialect="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        error = exc.errors[0] if exc.errors else {}
        where = f":{error['line']}" if error.get("line") else ""
        raise ConfigError(f"gold report {path}{where}: the SQL does not parse: "
                          f"{error.get('description', exc)}") from exc
    if len(statements) != 1:
        raise ConfigError(f"gold report {path}: expected one SELECT query, got "
                          f"{len(statements)} statements")
    if not isinstance(statements[0], exp.Query) or any(statements[0].find_all(*_WRITES)):
        raise ConfigError(f"gold report {path}: expected one SELECT query, got "
                          f"{type(statements[0]).__name__.upper()}")
    query = statements[0]
    ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}
    kinds = {silver_schema.lower(): "silver", gold_schema.lower(): "gold"}
    tables = []
    for table in query.find_all(exp.Table):
        line = table.this.meta.get("line", "?") if table.this else "?"
        where = f"gold report {path}:{line}"
        schema, name = table.db.lower(), table.name.lower()
        if not schema:
            if name in ctes or not name:
                continue
            raise ConfigError(f"{where}: table {table.name!r} has no schema: write "
                              f"{silver_schema}.{table.name} (silver) or {gold_schema}."
                              f"{table.name} (a report)")
        if table.catalog or schema not in kinds:
            raise ConfigError(f"{where}: {table.sql(dialect='spark')} is neither a silver "
                              f"table ({silver_schema}.<table>) nor a report "
                              f"({gold_schema}.<report>); the catalog comes from the config")
        start, end = table.args["db"].meta["start"], table.this.meta["end"] + 1
        tables.append(TableName(kinds[schema], schema, name, start, end, bool(table.alias)))
    for column in query.find_all(exp.Column):
        if column.db:
            raise ConfigError(f"gold report {path}: column {column.sql(dialect='spark')} "
                              "names its table with the schema: give the table an alias "
                              "and qualify the column with it")
    return tuple(tables)
