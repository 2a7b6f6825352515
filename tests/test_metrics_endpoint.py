"""The metrics endpoint of live verbs, scraped over HTTP and parsed with prometheus_client,
under a write workload on the source."""

from __future__ import annotations

import math
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Callable

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipelines.config import SourceConfig
from pipelines.embedded_pg import free_port
from pipelines.source.setup import run_setup
from tests.support.cli import start_lakehouse
from tests.support.config import write_config
from tests.support.engines import CLASSIC_TEST_CONF

pytestmark = [pytest.mark.postgres, pytest.mark.spark]  # run and silver use the engine

DEADLINE = 120  # seconds for anything to show up: a loaded 2-core machine is slow
NOTES = "public.notes"


SERVED_BY_RUN = [("lakehouse_ingest_landed_changes_total", ""),
                 ("lakehouse_ingest_landed_bytes_total", ""), ("lakehouse_ingest_up", ""),
                 ("lakehouse_slot_active", "lakehouse"),
                 ("lakehouse_slot_confirmed_lsn", "lakehouse"),
                 ("lakehouse_slot_lag_bytes", "lakehouse"),
                 ("lakehouse_silver_freshness_seconds", NOTES),
                 ("lakehouse_silver_table_stopped", NOTES),
                 ("lakehouse_silver_last_run_changes", NOTES),
                 ("lakehouse_silver_last_run_duration_seconds", NOTES),
                 ("lakehouse_bronze_last_commit_age_seconds", "")]


def scrape(port: int) -> dict[tuple[str, str], float]:
    """{(sample name, its first label value or ''): value}; empty while nobody answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    return {(s.name, next(iter(s.labels.values()), "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def wait_for(port: int, condition: Callable[[dict], bool]) -> dict:
    """The first scrape that meets `condition`."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        metrics = scrape(port)
        if metrics and condition(metrics):
            return metrics
        time.sleep(0.5)
    raise AssertionError(f"condition not met in {DEADLINE} s; last scrape: {metrics}")


class Workload:
    """Inserts into notes every 0.1 s on a thread, until stopped."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._write, daemon=True)

    def __enter__(self) -> "Workload":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _write(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop.wait(0.1):
                conn.execute("INSERT INTO notes (body) SELECT repeat('x', 200) "
                             "FROM generate_series(1, 20)")


def pipeline_config(dsn: str, tmp_path: Path, engine: str) -> Path:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id serial PRIMARY KEY, body text)")
    run_setup(SourceConfig(dsn, tables=(NOTES,)))
    return write_config(tmp_path / "lakehouse.yml", dsn, tmp_path / "lake", [NOTES],
                        engine=engine, spark={"master": "local[2]", "conf": CLASSIC_TEST_CONF},
                        ingest={"batch_seconds": 0.2}, silver={"interval_seconds": 1})


def start(config: Path, log: Path, *args: str) -> subprocess.Popen:
    return start_lakehouse(config, *args, stdout=log.open("w"), stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen, log: Path) -> None:
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 0, log.read_text()[-3000:]


def test_run_serves_one_endpoint_whose_values_move_under_a_workload(source_dsn, tmp_path,
                                                                    config_engine):
    config = pipeline_config(source_dsn, tmp_path, config_engine)
    port, log = free_port(), tmp_path / "run.log"
    run = start(config, log, "run", "--metrics-port", str(port))
    try:
        with Workload(source_dsn):
            applied = ("lakehouse_silver_applied_lsn", NOTES)
            landed = ("lakehouse_ingest_landed_changes_total", "")  # the ingest child's
            # A scrape leaves out what it could not read in time (the slot's 3 s query, the
            # child's counters, the lake): such a scrape does not count, the next may.
            first = wait_for(port, lambda m: m.get(applied, 0) > 0 and landed in m)
            last = wait_for(port, lambda m: m.get(applied, 0) > first[applied]
                            and all(key in m for key in SERVED_BY_RUN))
        assert 0 < first[landed] < last[landed]
        assert last[("lakehouse_ingest_landed_bytes_total", "")] > 0
        assert last[("lakehouse_ingest_up", "")] == 1
        assert last[("lakehouse_slot_active", "lakehouse")] == 1
        assert last[("lakehouse_slot_confirmed_lsn", "lakehouse")] > 0
        assert 0 <= last[("lakehouse_slot_lag_bytes", "lakehouse")]
        freshness = last[("lakehouse_silver_freshness_seconds", NOTES)]
        assert math.isfinite(freshness) and 0 <= freshness < DEADLINE
        assert last[("lakehouse_silver_table_stopped", NOTES)] == 0
        assert last[("lakehouse_silver_last_run_changes", NOTES)] > 0
        assert last[("lakehouse_silver_last_run_duration_seconds", NOTES)] > 0
        assert math.isfinite(last[("lakehouse_bronze_last_commit_age_seconds", "")])
        # Not errors_total{kind="source"} == 0: a scrape whose slot query timed out on a
        # loaded machine counts one, rightly. Every kind is exported from the start:
        assert ("lakehouse_errors_total", "data") in last
    finally:
        if run.poll() is None:
            stop(run, log)
    assert "metrics: http://" in log.read_text()  # the endpoint is logged once


def test_slot_lag_rises_on_silvers_endpoint_while_the_ingest_is_stopped(source_dsn, tmp_path,
                                                                        config_engine):
    config = pipeline_config(source_dsn, tmp_path, config_engine)
    port = free_port()
    ingest = start(config, tmp_path / "ingest.log", "ingest")
    silver = start(config, tmp_path / "silver.log", "silver", "--continuous",
                   "--metrics-port", str(port))
    lag, active = ("lakehouse_slot_lag_bytes", "lakehouse"), ("lakehouse_slot_active",
                                                               "lakehouse")
    try:
        with Workload(source_dsn):
            # The endpoint is up before the engine starts: no need to wait for a run.
            wait_for(port, lambda m: m.get(active) == 1
                     and ("lakehouse_bronze_last_commit_age_seconds", "") in m)
            stop(ingest, tmp_path / "ingest.log")
            # .get: a scrape whose slot query timed out has no slot series; wait_for
            # tries again.
            stopped = wait_for(port, lambda m: m.get(active) == 0 and lag in m)
            assert ("lakehouse_ingest_landed_changes_total", "") not in stopped  # not silver's
            wait_for(port, lambda m: m.get(lag, 0) > stopped[lag] + 100_000)
        assert silver.poll() is None  # silver kept serving without an ingest
    finally:
        if ingest.poll() is None:
            ingest.kill()
        silver.terminate()  # perhaps still starting its engine: no clean stop to check
        silver.wait(timeout=120)
