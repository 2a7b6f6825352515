"""Gold's bookkeeping in the lake: each report's last refresh, and each incremental
report's group index.

`_state/gold_refreshes` holds one row per report (upserted, pipelines.state_table): when
it was refreshed, whole or by groups and how many, and for an incremental report the
silver position it was refreshed to, what its inputs looked like, and how long its last
whole build and its last refresh by groups took (which of the two the next refresh
does). `status` reads it without Spark.

`_state/gold_groups/<report>` is an incremental report's group index: every key of its
silver table with the group its row was in at the last refresh. A refresh needs the
old group of a row that changed or was deleted, and silver keeps only the new row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from pipelines.lake import Lake, TableLocation
from pipelines.state_table import TIMESTAMP, StateTable

FULL, INCREMENTAL = "full", "incremental"

SCHEMA = pa.schema([
    pa.field("report", pa.string(), nullable=False),
    pa.field("refreshed_at", TIMESTAMP, nullable=False),
    pa.field("kind", pa.string(), nullable=False),  # full | incremental
    pa.field("rows", pa.int64(), nullable=False),  # rows written (a refresh: its groups')
    pa.field("seconds", pa.float64(), nullable=False),
    pa.field("groups", pa.int64()),  # groups replaced by an incremental refresh
    pa.field("reason", pa.string()),  # why an incremental report was rebuilt whole
    # incremental reports only:
    pa.field("grouping", pa.string()),  # the traced row expression it was built with
    pa.field("lsn", pa.int64()),  # the silver table's newest position it has seen
    pa.field("change_index", pa.int64()),
    pa.field("table_rows", pa.int64()),  # the silver table's rows, as the index has them
    pa.field("inputs", pa.string()),  # the other tables it reads, as they were (JSON)
    pa.field("needs_full", pa.bool_()),  # silver changed during the refresh: rebuild next
    pa.field("index_version", pa.int64()),  # the group index's Delta version it left
    pa.field("whole_seconds", pa.float64()),  # its last whole build's own work
    pa.field("groups_seconds", pa.float64()),  # its last refresh that replaced groups
])


@dataclass(frozen=True)
class Refresh:
    """One report's last refresh, as recorded."""

    report: str
    refreshed_at: datetime
    kind: str
    rows: int
    seconds: float
    groups: int | None = None
    reason: str | None = None
    grouping: str | None = None
    lsn: int | None = None
    change_index: int | None = None
    table_rows: int | None = None
    inputs: str | None = None
    needs_full: bool = False
    index_version: int | None = None
    whole_seconds: float | None = None
    groups_seconds: float | None = None

    @property
    def position(self) -> tuple[int, int]:
        """The silver position an incremental report was refreshed to (-1, -1: none)."""
        return (self.lsn, self.change_index) if self.lsn is not None else (-1, -1)

    def summary(self) -> str:
        """e.g. 'incremental, 12 groups (340 rows)' or 'full, 900 rows'."""
        if self.kind == INCREMENTAL:
            return f"incremental, {self.groups:,} group(s) replaced ({self.rows:,} rows)"
        reason = f" ({self.reason})" if self.reason else ""
        return f"full, {self.rows:,} rows{reason}"


def group_index(lake: Lake, report: str) -> TableLocation:
    """Where an incremental report keeps its group index."""
    return lake.state("gold_groups", report)


def group_staging(lake: Lake, report: str) -> TableLocation:
    """The silver rows of the groups an incremental refresh replaces (Parquet, scratch)."""
    return lake.state("gold_staging", report)


def read_refreshes(lake: Lake) -> dict[str, Refresh]:
    """Every report's last refresh, by report; empty before the first."""
    return {refresh.report: refresh for refresh in _refreshes(lake).records(Refresh)}


def record_refresh(lake: Lake, refresh: Refresh) -> None:
    """Replace the report's row (retrying a commit race with another report's writer)."""
    _refreshes(lake).upsert([refresh])


def create_refreshes(lake: Lake) -> None:
    """Create the refresh records' table, empty, unless it exists."""
    _refreshes(lake).create()


def _refreshes(lake: Lake) -> StateTable:
    return StateTable(lake.state("gold_refreshes"), SCHEMA, key="report")
