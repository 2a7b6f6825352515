"""`run_gold`: refresh the selected reports from silver.

Reports run several at a time (`gold.parallel_reports`), each after the reports it reads,
so it sees them refreshed in the same run; a report whose inputs are missing, or that
reads a report skipped in this run, is skipped with the reason. A report is rebuilt
whole (one Delta overwrite), or, with `incremental by`, by the groups that changed
(pipelines/gold/refresh.py); each refresh is recorded for `status`
(pipelines/gold/state.py).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Iterable

from pyspark.sql import SparkSession

from pipelines.config import Config, GoldConfig
from pipelines.errors import LakehouseError
from pipelines.gold.build import ReportRun, materialize_report
from pipelines.gold.definitions import Report, ReportSet, configured_reports
from pipelines.gold.due import DueReports
from pipelines.gold.io import GoldIO, gold_io_for, register_inputs
from pipelines.gold.refresh import refresh_incremental
from pipelines.gold.state import FULL, Refresh, create_refreshes, record_refresh
from pipelines.metrics import count_error
from pipelines.spark_jobs import in_this_threads_group

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GoldReport:
    """The outcome of one `run_gold`: a ReportRun per selected report, in run order."""

    runs: tuple[ReportRun, ...]
    seconds: float
    unchanged: int = 0  # left as they were: nothing they read changed (pipelines.gold.due)

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


def run_configured_gold(spark: SparkSession, config: Config,
                        reports: Iterable[str] | None = None, *, full: bool = False,
                        due: DueReports | None = None,
                        changed: Iterable[str] = ()) -> GoldReport | None:
    """`run_gold` over the reports of `gold.reports`, read now (so an edited report counts
    from the next run on); None when the config names no reports. With `due` (`lakehouse
    run`'s passes), only the reports it finds due after silver changed `changed` (source
    tables), and it remembers what this run refreshed."""
    definitions = configured_reports(config)
    if definitions is None:
        return None
    if due is not None:
        reports = due.select(definitions, changed)
    result = run_gold(spark, gold_io_for(config, spark), definitions, reports, full=full,
                      parallel=config.gold.parallel_reports)
    if due is None:
        return result
    due.refreshed(definitions, result.runs)
    return replace(result, unchanged=len(definitions.reports) - len(result.runs))


_LOGGED: set[tuple[str, str]] = set()  # (report, reason) logged in this process


def run_gold(spark: SparkSession, io: GoldIO, definitions: ReportSet,
             reports: Iterable[str] | None = None, *, full: bool = False,
             parallel: int = GoldConfig.parallel_reports) -> GoldReport:
    """Recompute `reports` (default: all) and overwrite their gold tables, `parallel` at
    a time; a report starts once the reports it reads have been refreshed in this run.

    `full` takes the columns of reports without a `-- columns:` header from their query
    again (else the existing table's columns are kept and enforced). A report that fails
    a check (ConfigError, DataError) is logged and recorded as failed before anything of
    it is written; the reports that do not read it are still built.
    """
    started = time.monotonic()
    selected = definitions.select(reports)
    if parallel > 1 and len(selected) > 1:
        create_refreshes(io.lake)  # before the reports' first records race to create it
    runs: dict[str, Future[ReportRun]] = {}
    # Reports are independent but for the ones they read: on a classic driver or a cluster
    # one report's jobs wait mostly on planning, scheduling and commits, which the others'
    # jobs fill. The pool takes reports in dependency order, so the reports a report
    # waits for were taken before it and are running or done: no thread waits on one
    # that cannot start.
    with ThreadPoolExecutor(max(1, min(parallel, len(selected))),
                            thread_name_prefix="gold") as pool:
        for report in selected:
            upstream = [runs[name] for name in report.gold if name in runs]
            runs[report.name] = pool.submit(in_this_threads_group(spark, _refresh_after),
                                            spark, report, io, upstream, full)
    return GoldReport(tuple(runs[r.name].result() for r in selected),
                      time.monotonic() - started)


def _refresh_after(spark: SparkSession, report: Report, io: GoldIO,
                   upstream: list[Future[ReportRun]], full: bool) -> ReportRun:
    """Refresh `report` once the reports it reads in this run are done; skipped when one
    of them was not built or its tables are missing, recorded as failed on its own
    mistake."""
    not_built = [run.report for run in (f.result() for f in upstream)
                 if run.skipped is not None or run.error is not None]
    if not_built:
        reason = f"it reads {', '.join(not_built)}, skipped in this run"
        views = {}
    else:
        views, missing = register_inputs(spark, io, report)
        reason = (f"table(s) not found: {', '.join(missing)} (run `lakehouse silver`, or "
                  "`lakehouse gold` for a report, first)") if missing else None
    if reason:
        log_once(logging.WARNING, report.name, "skipped", reason)
        return ReportRun(report.name, io.report_location(report.name), skipped=reason)
    try:
        return refresh_report(spark, report, views, io, full=full)
    except LakehouseError as exc:  # the report's own mistake: the others go on
        count_error("gold_report")
        log_once(logging.ERROR, report.name, "failed", str(exc))
        return ReportRun(report.name, io.report_location(report.name), error=str(exc),
                         exit_code=exc.exit_code)
    finally:
        for view in views.values():
            spark.catalog.dropTempView(view)


def log_once(level: int, report: str, what: str, reason: str) -> None:
    """`gold <report> <what>: <reason>` at `level` the first time in this process, then
    at DEBUG: a loop (`lakehouse run`) tries every second or so."""
    logged = (report, reason) in _LOGGED
    _LOGGED.add((report, reason))
    log.log(logging.DEBUG if logged else level, "gold %s %s: %s", report, what, reason)


def refresh_report(spark: SparkSession, report: Report, views: dict[tuple[str, str], str],
                   io: GoldIO, *, full: bool = False) -> ReportRun:
    """Build one report, by groups when it is incremental, and record the refresh."""
    if report.incremental is not None:
        return refresh_incremental(spark, report, views, io, full=full)
    run = materialize_report(spark, report, views, io, full=full)
    record_refresh(io.lake, Refresh(report.name, datetime.now(timezone.utc), FULL, run.rows,
                                    run.seconds))
    return run
