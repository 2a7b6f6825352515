"""Metrics read at scrape time from where the truth lives (pipelines/metrics.py).

The slot's position, lag and retained WAL come from Postgres, bronze's last commit and
silver's progress from the lake, so they are right whichever process serves them and
whether or not the ingest or a silver run is alive. A scrape that cannot read them
exports none of their series and counts the error (`lakehouse_errors_total`): a
monitoring system must never be told a stale value, nor get a failed scrape for it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Iterator

import psycopg
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pipelines.config import Config
from pipelines.ingest.lsn import parse_lsn
from pipelines.lake import Lake, read_delta
from pipelines.metrics import count_error
from pipelines.status import query_slot

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_SECONDS = 3  # Prometheus' default scrape timeout is 10 s


class SlotCollector(Collector):
    """The replication slot as pg_replication_slots has it, one query per scrape."""

    def __init__(self, config: Config) -> None:
        self.dsn = config.source.dsn
        self.slot = config.source.slot

    def collect(self) -> Iterator[Metric]:
        try:
            row = self._read()
        except psycopg.Error as exc:
            log.debug("metrics: cannot read slot %s: %s", self.slot, exc)
            count_error("source")
            return
        labels = [self.slot]
        active = GaugeMetricFamily("lakehouse_slot_active", "1 while a process (the "
                                   "ingest) streams from the slot, 0 when none does or "
                                   "the slot is missing.", labels=["slot"])
        active.add_metric(labels, 1 if row and row[0] else 0)
        yield active
        if row is None:
            return
        _, confirmed, lag, retained, _ = row
        for name, help_text, value in (
                ("lakehouse_slot_confirmed_lsn", "The position the ingest last confirmed "
                 "to Postgres (confirmed_flush_lsn) as a number: bytes into the WAL.",
                 parse_lsn(confirmed) if confirmed else None),
                ("lakehouse_slot_lag_bytes", "WAL written since the confirmed position: "
                 "what the ingest still has to read.", lag),
                ("lakehouse_slot_wal_retained_bytes", "WAL the server keeps for the slot "
                 "(from restart_lsn); absent once the slot is invalidated.", retained)):
            if value is not None:
                family = GaugeMetricFamily(name, help_text, labels=["slot"])
                family.add_metric(labels, value)
                yield family

    def _read(self) -> tuple | None:
        with psycopg.connect(self.dsn, autocommit=True,
                             connect_timeout=SCRAPE_TIMEOUT_SECONDS) as conn:
            conn.execute(f"SET statement_timeout = {SCRAPE_TIMEOUT_SECONDS * 1000}")
            return query_slot(conn, self.slot)


class LakeCollector(Collector):
    """Bronze's last commit and each silver table's progress, from their Delta logs and
    silver's progress table (delta-rs, no Spark)."""

    def __init__(self, config: Config) -> None:
        self.lake = Lake.from_config(config)

    def collect(self) -> Iterator[Metric]:
        try:
            bronze_at = self._bronze_commit_time()
            silver = self._silver_progress()
        except (OSError, DeltaError) as exc:
            log.debug("metrics: cannot read the lake: %s", exc)
            count_error("storage")
            return
        now = datetime.now(timezone.utc)
        if bronze_at is not None:
            age = GaugeMetricFamily("lakehouse_bronze_last_commit_age_seconds", "Seconds "
                                    "since the last commit to bronze's change log (grows "
                                    "while the source is idle, too).")
            age.add_metric([], (now - bronze_at).total_seconds())
            yield age
        applied = GaugeMetricFamily(
            "lakehouse_silver_applied_lsn", "The commit LSN (lake position) up to which "
            "silver applied bronze to the table.", labels=["table"])
        freshness = GaugeMetricFamily(
            "lakehouse_silver_freshness_seconds", "Seconds since the last silver run that "
            "recorded the table's progress (it then held every change bronze held at that "
            "run's start); grows while bronze gets no new commits, too.", labels=["table"])
        stopped = GaugeMetricFamily(
            "lakehouse_silver_table_stopped", "1 while the table is stopped by an error "
            "silver cannot apply past (`lakehouse status` names it), else 0.",
            labels=["table"])
        for row in silver:
            table = [row["table_name"]]
            applied.add_metric(table, max(row["lsn"], 0))
            updated = row["updated_at"]
            if updated.tzinfo is None:
                updated = updated.replace(tzinfo=timezone.utc)
            freshness.add_metric(table, max(0.0, (now - updated).total_seconds()))
            stopped.add_metric(table, 1 if row["error"] else 0)
        yield from (applied, freshness, stopped)

    def _bronze_commit_time(self) -> datetime | None:
        where = self.lake.bronze_changes
        if not where.exists():
            return None
        # Only the log: listing bronze's files would cost a scrape more the older it gets.
        table = DeltaTable(where.uri, storage_options=where.delta_options, without_files=True)
        millis = table.history(1)[0]["timestamp"]
        return datetime.fromtimestamp(millis / 1000, tz=timezone.utc)

    def _silver_progress(self) -> list[dict]:
        where = self.lake.silver_progress
        if not where.exists():
            return []
        return [row for row in read_delta(where).to_pylist() if row["table_name"] != "*"]
