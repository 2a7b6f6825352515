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
from typing import Callable, Iterator

import psycopg
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from prometheus_client.metrics_core import Metric
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.registry import Collector

from pipelines.config import Config
from pipelines.positions import parse_lsn
from pipelines.lake import Lake
from pipelines.embedded_pg import free_port
from pipelines.ingest.landed_metrics import INGEST
from pipelines.metrics import ERRORS, count_error, gauge, gauge_families, serve, with_child
from pipelines.silver.progress import progress_rows
from pipelines.silver.run_metrics import SILVER
from pipelines.status.report import commit_time, query_slot

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_SECONDS = 3  # Prometheus' default scrape timeout is 10 s


class SlotCollector(Collector):
    """The replication slot as pg_replication_slots has it, one query per scrape."""

    HELP = {
        "lakehouse_slot_active": "1 while a process (the ingest) streams from the slot, 0 "
        "when none does or the slot is missing.",
        "lakehouse_slot_confirmed_lsn": "The position the ingest last confirmed to Postgres "
        "(confirmed_flush_lsn) as a number: bytes into the WAL.",
        "lakehouse_slot_lag_bytes": "WAL written since the confirmed position: what the "
        "ingest still has to read.",
        "lakehouse_slot_wal_retained_bytes": "WAL the server keeps for the slot (from "
        "restart_lsn); absent once the slot is invalidated.",
    }

    def __init__(self, config: Config) -> None:
        self.dsn = config.source.dsn
        self.slot = config.source.slot

    def describe(self) -> Iterator[Metric]:
        return gauge_families(self.HELP, ["slot"], {})

    def collect(self) -> Iterator[Metric]:
        try:
            row = self._read()
        except psycopg.Error as exc:
            log.debug("metrics: cannot read slot %s: %s", self.slot, exc)
            count_error("source")
            return iter(())
        slot = [self.slot]
        values = {"lakehouse_slot_active": [(slot, 1 if row and row[0] else 0)]}
        if row is not None:
            _, confirmed, lag, retained, _ = row
            for name, value in (("lakehouse_slot_confirmed_lsn",
                                 parse_lsn(confirmed) if confirmed else None),
                                ("lakehouse_slot_lag_bytes", lag),
                                ("lakehouse_slot_wal_retained_bytes", retained)):
                if value is not None:
                    values[name] = [(slot, value)]
        return gauge_families(self.HELP, ["slot"], values)

    def _read(self) -> tuple | None:
        with psycopg.connect(self.dsn, autocommit=True,
                             connect_timeout=SCRAPE_TIMEOUT_SECONDS) as conn:
            conn.execute(f"SET statement_timeout = {SCRAPE_TIMEOUT_SECONDS * 1000}")
            return query_slot(conn, self.slot)


class LakeCollector(Collector):
    """Bronze's last commit and each silver table's progress, from their Delta logs and
    silver's progress table (delta-rs, no Spark)."""

    BRONZE_HELP = {
        "lakehouse_bronze_last_commit_age_seconds": "Seconds since the last commit to "
        "bronze's change log (grows while the source is idle, too).",
    }
    SILVER_HELP = {
        "lakehouse_silver_applied_lsn": "The commit LSN (lake position) up to which silver "
        "applied bronze to the table.",
        "lakehouse_silver_freshness_seconds": "Seconds since the last silver run that "
        "recorded the table's progress (it then held every change bronze held at that "
        "run's start); grows while bronze gets no new commits, too.",
        "lakehouse_silver_table_stopped": "1 while the table is stopped by an error silver "
        "cannot apply past (`lakehouse status` names it), else 0.",
    }

    def __init__(self, config: Config) -> None:
        self.lake = Lake.from_config(config)

    def describe(self) -> Iterator[Metric]:
        yield from gauge_families(self.BRONZE_HELP, [], {})
        yield from gauge_families(self.SILVER_HELP, ["table"], {})

    def collect(self) -> Iterator[Metric]:
        try:
            bronze_at = self._bronze_commit_time()
            silver = progress_rows(self.lake.silver_progress)
        except (OSError, DeltaError) as exc:
            log.debug("metrics: cannot read the lake: %s", exc)
            count_error("storage")
            return
        now = datetime.now(timezone.utc)
        if bronze_at is not None:
            yield from gauge_families(self.BRONZE_HELP, [], {
                "lakehouse_bronze_last_commit_age_seconds": [
                    ([], (now - bronze_at).total_seconds())]})
        values: dict[str, list] = {name: [] for name in self.SILVER_HELP}
        for row in silver:
            table = [row["table_name"]]
            values["lakehouse_silver_applied_lsn"].append((table, max(row["lsn"], 0)))
            values["lakehouse_silver_freshness_seconds"].append(
                (table, max(0.0, (now - row["updated_at"]).total_seconds())))
            values["lakehouse_silver_table_stopped"].append((table, 1 if row["error"] else 0))
        yield from gauge_families(self.SILVER_HELP, ["table"], values)

    def _bronze_commit_time(self) -> datetime | None:
        where = self.lake.bronze_changes
        if not where.exists():
            return None
        # Only the log: listing bronze's files would cost a scrape more the older it gets.
        return commit_time(DeltaTable(where.uri, storage_options=where.delta_options,
                                      without_files=True))


def serve_service(config: Config, port: int | None, *metrics: Collector,
                  key: str = "port", registry: CollectorRegistry = REGISTRY) -> int | None:
    """pipelines.metrics.serve for a long-running verb: its own `metrics` beside the slot
    and the lake, which every such endpoint serves (read at each scrape)."""
    return serve(config, port, *metrics, SlotCollector(config), LakeCollector(config),
                 key=key, registry=registry)


INGEST_UP = gauge("lakehouse_ingest_up", "1 while the ingest process of `lakehouse run` "
                  "runs, else 0.")
# What `run` takes from its ingest child: the counters the ingest keeps.
CHILD_FAMILIES = tuple(family.name for metric in (*INGEST, ERRORS)
                       for family in metric.describe())


def watch_ingest(running: Callable[[], bool]) -> None:
    """`lakehouse_ingest_up`, for `run`: only it knows whether its ingest runs."""
    INGEST_UP.set_function(lambda: 1 if running() else 0)


def serve_pipeline(config: Config, port: int | None) -> list[str]:
    """The endpoint of a process that runs silver beside an ingest child (`run`, `demo`):
    silver's figures, the slot and the lake, and the child's counters (see
    pipelines.metrics' docstring). Returns the config overrides that give the child its
    loopback endpoint; none without an endpoint. Start the child at once: until it
    listens, another process may take its port."""
    if port is None:
        port = config.metrics.port
    if port is None:
        return []
    child_port = free_port()
    serve_service(config, port, *SILVER, INGEST_UP,
                  registry=with_child(child_port, CHILD_FAMILIES))
    return [f"metrics.port={child_port}", "metrics.address=127.0.0.1"]
