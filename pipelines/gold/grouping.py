"""A report's `incremental by` column, traced back to the silver rows it comes from.

An incremental report is refreshed only for the groups that changed: the values of its
`incremental by` column that silver's new rows, deleted rows and the old values of
updated rows map to (pipelines/gold/refresh.py). That needs the column as a function of
one silver row, evaluated by the engine on the silver table itself. sqlglot's lineage
follows the column through the report's CTEs and subqueries down to the table it is
computed from; each step's expression is substituted into the one above it.

This is the one place where sqlglot writes SQL for the engine, and only one row-level
expression; the refresh checks on every build that it gives the report's own values
(pipelines/gold/refresh.py), so a difference between dialects fails loudly instead of
refreshing the wrong groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.lineage import Node, lineage

from pipelines.errors import ConfigError
from pipelines.gold.names import TableName

# Types whose values round-trip through a SQL literal exactly (CAST('<text>' AS <type>)),
# whatever the session time zone: the refresh names the groups it replaces as literals.
GROUP_TYPES = ("tinyint", "smallint", "int", "bigint", "string", "date")


@dataclass(frozen=True)
class Grouping:
    """`incremental by: <column>`: the report column, the silver table it is computed
    from and, in Spark SQL over that table's columns, how one row's value is computed."""

    column: str
    table: str  # the silver table, by name ("time_entries")
    expression: str

    def __str__(self) -> str:
        return self.column


def trace_grouping(column: str, sql: str, tables: tuple[TableName, ...],
                   path: Path | str) -> Grouping:
    """The Grouping of report column `column`; ConfigError when it is not a row-level
    function of exactly one silver table that the report reads once."""
    where = f"gold report {path}: incremental by {column}"
    try:
        root = lineage(column, sql, schema=None, dialect="spark")
    except (sqlglot.errors.SqlglotError, ValueError, KeyError) as exc:
        raise ConfigError(f"{where}: not a column of the query ({exc})") from exc
    expression = _row_expression(root, where)
    leaves = {(t.kind, t.name) for t in _leaf_tables(root, tables)}
    if len(leaves) != 1:
        found = ", ".join(sorted(f"{kind} {name}" for kind, name in leaves)) or "no table"
        raise ConfigError(f"{where}: the column must be computed from the columns of one "
                          f"silver table, it comes from {found}")
    (kind, table), = leaves
    if kind != "silver":
        raise ConfigError(f"{where}: the column comes from the report {table}; an "
                          "incremental report is computed from a silver table (a report "
                          "that reads other reports is recomputed whole)")
    if sum(1 for t in tables if t.kind == kind and t.name == table) != 1:
        raise ConfigError(f"{where}: the report reads {table} more than once, so a group's "
                          "rows cannot be told apart")
    return Grouping(column, table, expression.sql(dialect="spark"))


def _leaf_tables(root: Node, tables: tuple[TableName, ...]) -> list[TableName]:
    by_name = {t.parts: t for t in tables}
    found = []
    for node in root.walk():
        if isinstance(node.expression, exp.Table):
            key = (node.expression.db.lower(), node.expression.name.lower())
            if key in by_name:
                found.append(by_name[key])
    return found


def _row_expression(node: Node, where: str) -> exp.Expression:
    """`node`'s expression with every column it reads replaced by the expression it comes
    from, down to the silver table's own columns (bare names)."""
    expression = node.expression
    if isinstance(expression, exp.Table):  # a column read straight from the table
        return exp.column(node.name.split(".")[-1], quoted=True)
    if isinstance(expression, exp.Alias):
        expression = expression.this
    expression = expression.copy()
    bad = next(expression.find_all(exp.AggFunc, exp.Window, exp.Subquery, exp.Select), None)
    if bad is not None:
        raise ConfigError(f"{where}: the column is computed with {bad.sql(dialect='spark')}, "
                          "not from one row; group by a column computed from each row")
    downstream: dict[str, list[Node]] = {}
    for child in node.downstream:  # by "alias.column" and by "column"
        downstream.setdefault(child.name.lower(), []).append(child)
        downstream.setdefault(child.name.split(".")[-1].lower(), []).append(child)
    for column in list(expression.find_all(exp.Column)):
        name = f"{column.table}.{column.name}" if column.table else column.name
        sources = downstream.get(name.lower(), [])
        if len(sources) != 1:
            raise ConfigError(f"{where}: cannot tell where {column.sql(dialect='spark')} "
                              "comes from (a UNION or a column of several tables)")
        replacement = _row_expression(sources[0], where)
        if not isinstance(replacement, exp.Column):
            replacement = exp.Paren(this=replacement)
        if column is expression:
            expression = replacement
        else:
            column.replace(replacement)
    return expression
