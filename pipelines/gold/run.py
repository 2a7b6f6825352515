"""`run_gold`: rebuild the selected reports from silver, one Delta overwrite each.

Reports run in dependency order, so one that reads another sees it rebuilt in the same
run; a report whose inputs are missing, or that reads a report skipped in this run, is
skipped with the reason. Every report is checked before anything of it is written: the
engine accepts its SQL, the query has the declared (or previously inferred) columns, and
every value fits its type.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from pyspark.sql import DataFrame, SparkSession

from pipelines.engine import engine_message, query_errors
from pipelines.errors import ConfigError, LakehouseError
from pipelines.gold.conform import conform_to_schema, inferred_columns, validated_row_count
from pipelines.gold.definitions import Column, Report, ReportSet, configured_reports
from pipelines.gold.io import GoldIO, gold_io_for, register_inputs
from pipelines.metrics import count_error

if TYPE_CHECKING:
    from pipelines.config import Config

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

    def summary(self) -> str:
        """One line for the CLI."""
        if self.error:
            return f"{self.report}: failed, {self.error}"
        if self.skipped:
            return f"{self.report}: skipped, {self.skipped}"
        return f"{self.report}: {self.rows} rows in {self.seconds:.2f} s -> {self.target}"


@dataclass(frozen=True)
class GoldReport:
    """The outcome of one `run_gold`: a ReportRun per selected report, in run order."""

    runs: tuple[ReportRun, ...]
    seconds: float

    @property
    def written(self) -> tuple[ReportRun, ...]:
        return tuple(r for r in self.runs if r.skipped is None and r.error is None)

    @property
    def skipped(self) -> tuple[ReportRun, ...]:
        return tuple(r for r in self.runs if r.skipped is not None)

    @property
    def failed(self) -> tuple[ReportRun, ...]:
        return tuple(r for r in self.runs if r.error is not None)

    @property
    def rows(self) -> dict[str, int]:
        """Rows written per report (skipped reports are absent)."""
        return {r.report: r.rows for r in self.written}


def run_configured_gold(spark: SparkSession, config: "Config",
                        reports: Iterable[str] | None = None, *,
                        full: bool = False) -> GoldReport | None:
    """`run_gold` over the reports of `gold.reports`, read now (so an edited report counts
    from the next run on); None when the config names no reports."""
    definitions = configured_reports(config)
    if definitions is None:
        return None
    return run_gold(spark, gold_io_for(config, spark), definitions, reports, full=full)


_LOGGED: set[tuple[str, str]] = set()  # (report, reason) logged in this process


def run_gold(spark: SparkSession, io: GoldIO, definitions: ReportSet,
             reports: Iterable[str] | None = None, *, full: bool = False) -> GoldReport:
    """Recompute `reports` (default: all) and overwrite their gold tables.

    `full` takes the columns of reports without a `-- columns:` header from their query
    again (else the existing table's columns are kept and enforced). A report that fails
    a check (ConfigError, DataError) is logged and recorded as failed before anything of
    it is written; the reports that do not read it are still built.
    """
    started = time.monotonic()
    runs: list[ReportRun] = []
    not_built: set[str] = set()
    for report in definitions.select(reports):
        upstream = [g for g in report.gold if g in not_built]
        if upstream:
            reason = f"it reads {', '.join(upstream)}, skipped in this run"
        else:
            views, missing = register_inputs(spark, io, report)
            reason = (f"table(s) not found: {', '.join(missing)} (run `lakehouse silver`, or "
                      "`lakehouse gold` for a report, first)") if missing else None
        if reason:
            log_once(logging.WARNING, report.name, "skipped", reason)
            not_built.add(report.name)
            runs.append(ReportRun(report.name, io.report_location(report.name), skipped=reason))
            continue
        try:
            runs.append(materialize_report(spark, report, views, io, full=full))
        except LakehouseError as exc:  # the report's own mistake: the others go on
            count_error("gold_report")
            log_once(logging.ERROR, report.name, "failed", str(exc))
            not_built.add(report.name)
            runs.append(ReportRun(report.name, io.report_location(report.name),
                                  error=str(exc), exit_code=exc.exit_code))
        finally:
            for view in views.values():
                spark.catalog.dropTempView(view)
    return GoldReport(tuple(runs), time.monotonic() - started)


def log_once(level: int, report: str, what: str, reason: str) -> None:
    """`gold <report> <what>: <reason>` at `level` the first time in this process, then
    at DEBUG: a loop (`lakehouse run`) tries every second or so."""
    logged = (report, reason) in _LOGGED
    _LOGGED.add((report, reason))
    log.log(logging.DEBUG if logged else level, "gold %s %s: %s", report, what, reason)


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
    """Build, check (one action) and write (one Delta commit) a single report."""
    started = time.monotonic()
    df = build_report(spark, report, views)
    columns = report_columns(spark, report, df, io, full)
    try:
        rows = validated_row_count(df, columns, str(report.path))
    except ConfigError as exc:
        raise ConfigError(f"gold report {report.path}: {exc}") from exc
    io.write_report(conform_to_schema(df, columns), report.name)
    seconds = time.monotonic() - started
    log.info("gold %s: %d rows in %.2f s", report.name, rows, seconds)
    return ReportRun(report.name, io.report_location(report.name), rows, seconds)
