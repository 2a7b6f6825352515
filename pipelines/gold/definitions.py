"""The user's gold reports: a directory of `<report>.sql` files, read and checked.

A report file is an optional header of `-- key: value` lines, then one SELECT over silver
and other reports by the names analysts use (`lakehouse_silver.users`,
`lakehouse_gold.hours_per_project_per_day`: the schemas of the config's `databricks`
section, as in `lakehouse sql` and on Databricks less the catalog). Everything here is
checked without a Spark session, so a bad file is exit 2 naming it before any work.

The SQL is parsed with sqlglot (Spark dialect) only to find the tables it names
(pipelines.gold.names); the engine runs the user's own text, with each of those names
replaced in place by the view that `run` registers for it (`rewritten`). sqlglot is never
asked to regenerate a query, so a difference between its dialect and the engine cannot
change what a report means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import sqlglot
from sqlglot import exp

from pipelines.errors import ConfigError
from pipelines.gold.grouping import GROUP_TYPES, Grouping, trace_grouping
from pipelines.gold.names import TableName, table_names

if TYPE_CHECKING:
    from pipelines.config import Config

Column = tuple[str, str]  # (name, Spark SQL type)

HEADER_KEYS = ("description", "columns", "display order", "incremental by")
_HEADER_LINE = re.compile(r"--\s*([a-z][a-z ]*?)\s*:(?:\s+(.*?))?\s*\Z")
_REPORT_NAME = re.compile(r"[a-z_][a-z0-9_]*\Z")
_COLUMN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s+(\S.*)\Z", re.S)
_ORDER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?:\s+(asc|desc))?\Z", re.I)


@dataclass(frozen=True)
class Report:
    """One report file: its SQL, the header's settings and the tables the SQL reads."""

    name: str
    path: Path
    sql: str  # the query as written, without the header or a final `;`
    description: str = ""
    columns: tuple[Column, ...] | None = None  # declared; None: inferred at the first build
    display_order: tuple[str, ...] = ()  # "column" or "column desc"
    tables: tuple[TableName, ...] = ()  # as often as the SQL names them
    incremental: Grouping | None = None  # refreshed by groups of this column, else whole

    @property
    def silver(self) -> tuple[str, ...]:
        """The silver tables it reads, by name ("users")."""
        return tuple(dict.fromkeys(t.name for t in self.tables if t.kind == "silver"))

    @property
    def gold(self) -> tuple[str, ...]:
        """The reports it reads."""
        return tuple(dict.fromkeys(t.name for t in self.tables if t.kind == "gold"))

    def rewritten(self, view: dict[tuple[str, str], str]) -> str:
        """The SQL with each table name replaced by its view (`view[(schema, name)]`),
        aliased to the table's own name when the SQL gave none, so `users.email` still
        resolves. Spliced from the end so earlier spans stay valid."""
        text = self.sql
        for table in sorted(self.tables, key=lambda t: t.start, reverse=True):
            replacement = f"`{view[table.parts]}`"
            if not table.aliased:
                replacement += f" AS `{table.name}`"
            text = text[:table.start] + replacement + text[table.end:]
        return text


@dataclass(frozen=True)
class ReportSet:
    """The reports of a directory, in dependency order (a report after those it reads)."""

    directory: Path
    reports: tuple[Report, ...] = field(default_factory=tuple)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.reports)

    def get(self, name: str) -> Report:
        return next(r for r in self.reports if r.name == name)

    def select(self, names: Iterable[str] | None) -> tuple[Report, ...]:
        """`names` (all when None) in dependency order; ConfigError for an unknown name.
        A selected report reads the reports it depends on as they are."""
        if names is None:
            return self.reports
        wanted = set(names)
        unknown = sorted(wanted - set(self.names))
        if unknown:
            raise ConfigError(f"unknown gold report(s) {', '.join(unknown)}: {self.directory} "
                              f"has {', '.join(sorted(self.names)) or 'none'}")
        return tuple(r for r in self.reports if r.name in wanted)


def configured_reports(config: "Config") -> ReportSet | None:
    """The reports of `gold.reports`, checked; None when the config names no directory."""
    if config.gold.reports is None:
        return None
    db = config.databricks
    return load_reports(config.gold.reports, db.silver_schema, db.gold_schema)


def load_reports(directory: str | Path, silver_schema: str, gold_schema: str) -> ReportSet:
    """Every `*.sql` file of `directory`, parsed and checked, in dependency order."""
    directory = Path(directory)
    paths = sorted(directory.glob("*.sql"))
    reports = {}
    for path in paths:
        report = parse_report(path, silver_schema, gold_schema)
        if report.name in reports:
            raise ConfigError(f"gold report {path}: another file is named {report.name} too")
        reports[report.name] = report
    for report in reports.values():
        unknown = [g for g in report.gold if g not in reports]
        if unknown:
            raise ConfigError(f"gold report {report.path}: {gold_schema}.{unknown[0]} is not a "
                              f"report in {directory}")
    graph = TopologicalSorter({r.name: sorted(r.gold) for r in reports.values()})
    try:
        graph.prepare()
    except CycleError as exc:
        cycle = exc.args[1]
        raise ConfigError(f"gold reports in {directory} read each other in a cycle: "
                          + " -> ".join(reports[name].path.name for name in cycle)) from exc
    order = []
    while graph.is_active():  # ties by name, so the order is the same on every run
        ready = sorted(graph.get_ready())
        order += ready
        graph.done(*ready)
    return ReportSet(directory, tuple(reports[name] for name in order))


def parse_report(path: Path, silver_schema: str, gold_schema: str) -> Report:
    """One report file, checked: header, name, a single SELECT, and the tables it names."""
    name = path.stem
    if not _REPORT_NAME.match(name):
        raise ConfigError(f"gold report {path}: the file name is the report's table name, "
                          "expected lower-case letters, digits and _ (e.g. hours_per_day.sql)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"gold report {path}: cannot read it: {exc}") from exc
    header, body_at = _parse_header(text, path)
    # the header's lines stay as blank lines, so line numbers (sqlglot's, the engine's)
    # are the file's
    sql = "\n" * text[:body_at].count("\n") + _strip_final_semicolon(text[body_at:])
    tables = table_names(sql, path, silver_schema, gold_schema)
    incremental = header.pop("incremental", None)
    if incremental is not None:
        header["incremental"] = trace_grouping(incremental, sql, tables, path)
        declared = dict((n.lower(), t.lower()) for n, t in header.get("columns", ()))
        type_ = declared.get(incremental.lower(), "string")
        if declared and type_ not in GROUP_TYPES:
            raise ConfigError(f"gold report {path}: incremental by {incremental}: its "
                              f"declared type is {type_}; a group column is one of "
                              f"{', '.join(GROUP_TYPES)}")
    report = Report(name, path, sql, tables=tables, **header)
    if name in report.gold:
        raise ConfigError(f"gold report {path}: it reads itself ({gold_schema}.{name})")
    return report


def _parse_header(text: str, path: Path) -> tuple[dict, int]:
    """The leading `-- key: value` lines as Report fields, and where the SQL starts."""
    values: dict[str, str] = {}
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        stripped = line.strip()
        match = _HEADER_LINE.match(stripped)
        if not match:  # the header ends at its first other line, a blank one included
            if stripped or values:
                break
            offset += len(line)
            continue
        key, value = match.group(1), match.group(2) or ""
        where = f"gold report {path}:{number}"
        if key not in HEADER_KEYS:
            raise ConfigError(f"{where}: unknown header key {key!r}, expected one of "
                              f"{', '.join(HEADER_KEYS)}")
        if key in values and key != "columns":
            raise ConfigError(f"{where}: {key} is given twice")
        if not value:
            raise ConfigError(f"{where}: {key} has no value")
        values[key] = f"{values[key].rstrip(',')}, {value}" if key in values else value
        offset += len(line)
    header: dict = {}
    if "description" in values:
        header["description"] = values["description"]
    if "columns" in values:
        header["columns"] = parse_columns(values["columns"], path)
    if "display order" in values:
        header["display_order"] = _display_order(values["display order"], path)
    if "incremental by" in values:
        column = values["incremental by"]
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", column):
            raise ConfigError(f"gold report {path}: incremental by: expected one column "
                              f"name, got {column!r}")
        header["incremental"] = column
    return header, offset


def parse_columns(text: str, path: Path | str) -> tuple[Column, ...]:
    """`name type, name type, ...` (types as Spark SQL writes them: decimal(18,4),
    array<string>), checked with sqlglot's Spark type grammar."""
    columns = []
    for item in _split_top_level(text):
        match = _COLUMN.match(item.strip())
        if not match:
            raise ConfigError(f"gold report {path}: columns: expected `name type`, got "
                              f"{item.strip()!r}")
        name, type_ = match.group(1), match.group(2).strip()
        try:
            exp.DataType.build(type_, dialect="spark")
        except (sqlglot.errors.ParseError, ValueError) as exc:
            raise ConfigError(f"gold report {path}: columns: {name} has type {type_!r}, "
                              "which is not a Spark SQL type") from exc
        columns.append((name, type_))
    names = [n.lower() for n, _ in columns]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"gold report {path}: columns: {', '.join(repeated)} declared twice")
    return tuple(columns)


def _split_top_level(text: str) -> list[str]:
    """`text` split at commas outside <> and () (decimal(18,4), map<string,int>)."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "<("
        depth -= char in ">)"
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def _display_order(text: str, path: Path) -> tuple[str, ...]:
    order = []
    for item in text.split(","):
        match = _ORDER.match(item.strip())
        if not match:
            raise ConfigError(f"gold report {path}: display order: expected `column [asc|desc]`, "
                              f"got {item.strip()!r}")
        order.append(match.group(1) + (" desc" if (match.group(2) or "").lower() == "desc"
                                       else ""))
    return tuple(order)


def _strip_final_semicolon(sql: str) -> str:
    sql = sql.rstrip()
    return sql[:-1].rstrip() if sql.endswith(";") else sql
