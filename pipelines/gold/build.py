"""Build one report: its SQL over registered views, checked, then written.

Every report is checked before anything of it is written: the engine accepts its SQL,
the query has the declared (or previously inferred) columns, and every value fits its
type.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from pipelines.engine import engine_message, query_errors
from pipelines.errors import ConfigError
from pipelines.gold.conform import conform_to_schema, inferred_columns, validated_row_count
from pipelines.gold.definitions import Column, Report
from pipelines.gold.io import GoldIO

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportRun:
    """What happened to one report: written with `rows` rows, skipped (an input is
    missing) or failed (its file or its values are wrong), and why."""

    report: str
    target: str
    rows: int = 0
    seconds: float = 0.0
    skipped: str | None = None
    error: str | None = None
    exit_code: int = 0  # of the error: 2 for the report's file, 4 for its values
    groups: int | None = None  # replaced by an incremental refresh; None: built whole

    def summary(self) -> str:
        """One line for the CLI."""
        if self.error:
            return f"{self.report}: failed, {self.error}"
        if self.skipped:
            return f"{self.report}: skipped, {self.skipped}"
        how = "" if self.groups is None else f" in {self.groups} group(s)"
        return (f"{self.report}: {self.rows} rows{how} in {self.seconds:.2f} s -> "
                f"{self.target}")


def build_report(spark: SparkSession, report: Report,
                 views: dict[tuple[str, str], str]) -> DataFrame:
    """The report's SQL over its registered views; the engine's rejection is a ConfigError
    naming the file (the view names in its message are the engine's, the lines the file's)."""
    try:
        df = spark.sql(report.rewritten(views))
        df.schema  # analysis: Spark Connect and Sail are lazy until asked
    except query_errors() as exc:
        raise ConfigError(f"gold report {report.path}: the engine rejects the query: "
                          f"{_user_names(engine_message(exc), views)}") from exc
    return df


def _user_names(message: str, views: dict[tuple[str, str], str]) -> str:
    for (schema, name), view in views.items():
        message = message.replace(view, f"{schema}.{name}")
    return message


def report_columns(spark: SparkSession, report: Report, df: DataFrame, io: GoldIO,
                   full: bool) -> tuple[Column, ...]:
    """The columns the report is written with: declared, else those of its existing
    table (so a later run cannot change them silently), else its query's."""
    if report.columns is not None:
        return report.columns
    if not full and io.report_exists(report.name):
        existing = inferred_columns(io.read_report(spark, report.name))
        if sorted(n.lower() for n, _ in existing) != sorted(c.lower() for c in df.columns):
            raise ConfigError(
                f"gold report {report.path}: its columns changed from "
                f"{', '.join(n for n, _ in existing)} to {', '.join(df.columns)}; declare them "
                f"in a `-- columns:` header, or run `lakehouse gold --full --report "
                f"{report.name}` to take the new ones")
        return existing
    try:
        return inferred_columns(df)
    except ConfigError as exc:
        raise ConfigError(f"gold report {report.path}: {exc}") from exc


def materialize_report(spark: SparkSession, report: Report, views: dict[tuple[str, str], str],
                       io: GoldIO, *, full: bool = False) -> ReportRun:
    """Build and write (one Delta commit) a single report, checked as it is written: a
    value that does not fit its column fails the write before its commit, and only then
    is the report computed again to say which (one Spark action less for every report
    that fits)."""
    started = time.monotonic()
    df = build_report(spark, report, views)
    columns = report_columns(spark, report, df, io, full)
    try:
        conformed = conform_to_schema(df, columns)
    except ConfigError as exc:
        raise ConfigError(f"gold report {report.path}: {exc}") from exc
    try:
        io.write_report(conformed, report.name)
    except query_errors():
        validated_row_count(df, columns, str(report.path))  # a misfit: a DataError naming it
        raise
    rows = io.report_rows(report.name)
    seconds = time.monotonic() - started
    log.info("gold %s: %d rows in %.2f s", report.name, rows, seconds)
    return ReportRun(report.name, io.report_location(report.name), rows, seconds)
