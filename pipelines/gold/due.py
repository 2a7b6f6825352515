"""Which reports a `lakehouse run` pass refreshes: those whose inputs changed.

A pass that changed silver's `users` has nothing new for a report over `orders` alone:
rebuilding it costs the engine the same as any refresh and writes a new Delta version
with the same rows. The loop remembers, per report, the definition it last refreshed
without an error; a report is due when a silver table it reads changed in this pass,
when a report it reads is due, when its file changed, or when this process has not
refreshed it yet (its first pass, a failure or a skip since). `lakehouse gold` and the
demo refresh every report they are asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from pipelines.catalog import catalog_silver_name
from pipelines.names import split_table

if TYPE_CHECKING:
    from pipelines.gold.build import ReportRun
    from pipelines.gold.definitions import Report, ReportSet


@dataclass
class DueReports:
    """The reports refreshed in this process, each as it was defined then."""

    fresh: dict[str, "Report"] = field(default_factory=dict)

    def select(self, reports: "ReportSet", changed: Iterable[str]) -> tuple[str, ...]:
        """The reports to refresh after a silver pass that changed `changed` (source
        tables, `schema.table`), in dependency order."""
        silver = {catalog_silver_name(*split_table(table)) for table in changed}
        due: set[str] = set()
        for report in reports.reports:  # a report comes after the reports it reads
            if (self.fresh.get(report.name) != report or silver & set(report.silver)
                    or due & set(report.gold)):
                due.add(report.name)
        return tuple(r.name for r in reports.reports if r.name in due)

    def refreshed(self, reports: "ReportSet", runs: Iterable["ReportRun"]) -> None:
        """Remember the reports `runs` wrote; forget those that failed or were skipped."""
        for run in runs:
            if run.skipped is None and run.error is None:
                self.fresh[run.report] = reports.get(run.report)
            else:
                self.fresh.pop(run.report, None)
