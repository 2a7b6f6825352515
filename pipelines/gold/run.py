"""`run_gold`: rebuild the selected gold reports from silver, one Delta overwrite each.

A full recompute per run: every report is a small aggregate of the current silver rows
(see docs/gold.md for how that scales and what an incremental version would do).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterable

from pyspark.sql import DataFrame, SparkSession

from pipelines.catalog import TableNames
from pipelines.gold.conform import conform_to_schema, validated_row_count
from pipelines.gold.io import GoldIO, TableGoldIO, register_silver_views
from pipelines.gold.reports import ReportSpec, select_reports
from pipelines.lake import Lake

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReportRun:
    """What happened to one report: written with `rows` rows, or skipped and why."""

    report: str
    target: str
    rows: int = 0
    seconds: float = 0.0
    skipped: str | None = None

    def summary(self) -> str:
        """One line for the CLI."""
        if self.skipped:
            return f"{self.report}: skipped, {self.skipped}"
        return f"{self.report}: {self.rows} rows in {self.seconds:.2f} s -> {self.target}"


@dataclass(frozen=True)
class GoldReport:
    """The outcome of one `run_gold`: a ReportRun per selected report, in catalogue order."""

    runs: tuple[ReportRun, ...]
    seconds: float

    @property
    def written(self) -> tuple[ReportRun, ...]:
        return tuple(r for r in self.runs if r.skipped is None)

    @property
    def skipped(self) -> tuple[ReportRun, ...]:
        return tuple(r for r in self.runs if r.skipped is not None)

    @property
    def rows(self) -> dict[str, int]:
        """Rows written per report (skipped reports are absent)."""
        return {r.report: r.rows for r in self.written}


def build_report(spark: SparkSession, spec: ReportSpec) -> DataFrame:
    """The report's SQL over the registered views, before the cast to its declared schema."""
    return spark.sql(spec.sql())


_SKIPS_LOGGED: set[tuple[str, str]] = set()  # (report, reason) warned about in this process


def run_gold(spark: SparkSession, lake: Lake, reports: Iterable[str] | None = None,
             *, io: GoldIO | None = None) -> GoldReport:
    """Recompute `reports` (default: all) from silver and overwrite their gold tables.

    A report whose silver tables are missing is skipped with the reason; a report whose
    values do not fit its declared schema raises DataError before anything of it is written.
    """
    specs = select_reports(reports)
    io = io or TableGoldIO(spark, TableNames(lake))
    started = time.monotonic()
    needed = list(dict.fromkeys(t for spec in specs for t in spec.tables))
    missing = set(register_silver_views(spark, io, needed))
    runs = []
    for spec in specs:
        lacking = [t for t in spec.tables if t in missing]
        if lacking:
            reason = ("silver table(s) not found: "
                      + ", ".join(io.silver_location(t) for t in lacking)
                      + " (run `lakehouse silver` first)")
            # A loop (`lakehouse run`) tries every second or so: say it once per process.
            level = logging.DEBUG if (spec.name, reason) in _SKIPS_LOGGED else logging.WARNING
            _SKIPS_LOGGED.add((spec.name, reason))
            log.log(level, "gold %s skipped: %s", spec.name, reason)
            runs.append(ReportRun(spec.name, io.report_location(spec.name), skipped=reason))
            continue
        runs.append(materialize_report(spark, spec, io))
    return GoldReport(tuple(runs), time.monotonic() - started)


def materialize_report(spark: SparkSession, spec: ReportSpec, io: GoldIO) -> ReportRun:
    """Build, validate (one action) and write (one Delta commit) a single report."""
    started = time.monotonic()
    report = build_report(spark, spec)
    rows = validated_row_count(report, spec.columns, spec.name)
    io.write_report(conform_to_schema(report, spec.columns), spec.name)
    seconds = time.monotonic() - started
    log.info("gold %s: %d rows in %.2f s", spec.name, rows, seconds)
    return ReportRun(spec.name, io.report_location(spec.name), rows, seconds)
