"""The gold report catalogue: each report's SQL text, declared schema and silver inputs.

No PySpark here: the CLI builds `--report` choices from this module without a session.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import Iterable

Column = tuple[str, str]  # (name, Spark SQL type)

# The view names the report SQL is written against: silver tables of the demo schema.
SILVER_SCHEMA = "public"
SILVER_VIEWS = ("users", "clients", "projects", "project_members", "time_entries")


@dataclass(frozen=True)
class ReportSpec:
    """One gold report: `sql/<name>.sql` over `tables`, cast to `columns` before writing."""

    name: str
    description: str
    tables: tuple[str, ...]  # silver tables (= view names) the SQL reads
    columns: tuple[Column, ...]  # the declared schema, in column order
    display_order: tuple[str, ...]  # how humans see it: "column" or "column desc"

    @property
    def ddl(self) -> str:
        """The declared schema as a DDL string, e.g. "day date, hours decimal(18,4)"."""
        return ", ".join(f"{name} {type_}" for name, type_ in self.columns)

    def sql(self) -> str:
        """The report's query text, loaded from the package data, with shared fragments."""
        return load_sql(self.name).replace("{finished_entries}", load_sql("finished_entries"))


REPORTS: dict[str, ReportSpec] = {spec.name: spec for spec in (
    ReportSpec(
        name="hours_per_project_per_day",
        description="hours of finished time entries per project per UTC day of started_at",
        tables=("time_entries", "projects", "clients"),
        columns=(("day", "date"), ("project_id", "int"), ("project_name", "string"),
                 ("client_id", "int"), ("client_name", "string"), ("entries", "bigint"),
                 ("hours", "decimal(18,4)")),
        display_order=("day desc", "hours desc", "project_id"),
    ),
    ReportSpec(
        name="hours_per_user_per_week",
        description="hours of finished time entries per user per ISO week (UTC)",
        tables=("time_entries", "users"),
        columns=(("iso_year", "int"), ("iso_week", "int"), ("week_start", "date"),
                 ("user_id", "bigint"), ("email", "string"), ("full_name", "string"),
                 ("entries", "bigint"), ("hours", "decimal(18,4)")),
        display_order=("week_start desc", "hours desc", "user_id"),
    ),
    ReportSpec(
        name="billable_per_client_per_month",
        description="billable amount and billable hours x hourly rate per client per UTC month",
        tables=("time_entries", "projects", "clients"),
        columns=(("month", "date"), ("client_id", "int"), ("client_name", "string"),
                 ("entries", "bigint"), ("billable_amount", "decimal(20,2)"),
                 ("billable_hours", "decimal(18,4)"), ("hourly_rate", "decimal(10,2)"),
                 ("billable_hours_amount", "decimal(20,2)")),
        display_order=("month desc", "billable_amount desc", "client_id"),
    ),
    ReportSpec(
        name="active_users_per_day",
        description="distinct users with at least one time entry per UTC day of started_at",
        tables=("time_entries",),
        columns=(("day", "date"), ("active_users", "bigint")),
        display_order=("day desc",),
    ),
)}

REPORT_NAMES: tuple[str, ...] = tuple(REPORTS)


def load_sql(name: str) -> str:
    """The text of `sql/<name>.sql` (without a trailing `;`: spark.sql takes one statement)."""
    text = files("pipelines.gold").joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")
    return text.strip().rstrip(";")


def select_reports(names: Iterable[str] | None = None) -> tuple[ReportSpec, ...]:
    """The specs for `names` (all reports when None), in catalogue order, without repeats."""
    if names is None:
        return tuple(REPORTS.values())
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in REPORTS]
    if unknown:
        raise ValueError(f"unknown gold report(s) {', '.join(unknown)}: expected any of "
                         f"{', '.join(REPORT_NAMES)}")
    if not wanted:
        raise ValueError("no gold report selected: pass None for all, or report names")
    return tuple(REPORTS[n] for n in REPORT_NAMES if n in wanted)
