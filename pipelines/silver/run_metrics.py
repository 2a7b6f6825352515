"""Silver's figures on the metrics endpoint: each table's last run that had new bronze."""

from __future__ import annotations

from typing import Iterable, Protocol

from pipelines.metrics import count_error, gauge

SILVER_RUN_SECONDS = gauge(
    "lakehouse_silver_last_run_duration_seconds", "Seconds the last silver run that had "
    "new bronze for the table spent applying it.", ["table"])
SILVER_RUN_CHANGES = gauge(
    "lakehouse_silver_last_run_changes", "Bronze changes (inserts, updates, deletes) the "
    "last silver run that had new bronze for the table applied.", ["table"])
SILVER = (SILVER_RUN_SECONDS, SILVER_RUN_CHANGES)


class TableRun(Protocol):
    """What the figures read of a table's report (pipelines.silver.job.TableReport)."""

    table: str
    inserts: int
    updates: int
    deletes: int
    error: str | None
    seconds: float


def record_silver_run(tables: Iterable[TableRun]) -> None:
    """A silver run's per-table figures; a table it could not apply counts an error."""
    for table in tables:
        if table.error:
            count_error("silver_table")
            continue
        SILVER_RUN_SECONDS.labels(table.table).set(table.seconds)
        SILVER_RUN_CHANGES.labels(table.table).set(table.inserts + table.updates
                                                   + table.deletes)
