"""Crash safety: SIGKILL the ingest at random moments (and restart Postgres) under load.

Bronze must hold every change position the source produced once and only once, as read
by an independent reader: a second slot drained with pg_logical_slot_get_binary_changes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest

from pipelines.config import Config
from pipelines.lake import Lake, read_delta
from tests.support.cli import start_lakehouse
from tests.support.config import write_config
from tests.support.ingest import TABLES, bronze, reference_positions

pytestmark = pytest.mark.postgres


def workload(dsn: str, stop: threading.Event, seed: int, changes: tuple[int, int] = (1, 20),
             name: str = "v0", pause: float = 0.01) -> int:
    """Transactions of inserts, updates, deletes, up to `pause` seconds apart; survives a
    server restart."""
    rng = random.Random(seed)
    next_id, commits = 1, 0
    while not stop.is_set():
        try:
            with psycopg.connect(dsn) as conn:
                while not stop.is_set():
                    for _ in range(rng.randint(*changes)):
                        choice = rng.random()
                        if choice < 0.6 or next_id < 10:
                            conn.execute("INSERT INTO items (id, name) VALUES (%s, %s)",
                                         (next_id, name))
                            next_id += 1
                        elif choice < 0.9:
                            conn.execute("UPDATE items SET name = md5(random()::text) "
                                         "WHERE id = %s", (rng.randrange(1, next_id),))
                        else:
                            conn.execute("DELETE FROM items WHERE id = %s",
                                         (rng.randrange(1, next_id),))
                    conn.commit()
                    commits += 1
                    time.sleep(rng.random() * pause)
        except psycopg.OperationalError:
            time.sleep(0.3)  # server restarting
    return commits


def wait_until_streaming(dsn: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(dsn) as conn:
            if conn.execute("SELECT active FROM pg_replication_slots "
                            "WHERE slot_name = 'lakehouse'").fetchone()[0]:
                return
        time.sleep(0.1)
    raise AssertionError("the ingest never attached to the slot")


def kill_loop_config(source, tmp_path, **ingest) -> Path:
    """The reference slot (created now: it sees every later change) and a config file
    for ingest processes that get killed."""
    with psycopg.connect(source.source.dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('reference', 'pgoutput')")
    return write_config(tmp_path / "lakehouse.yml", source.source.dsn, source.lake.path, TABLES,
                        storage_options=source.lake.storage_options,
                        ingest={"batch_seconds": 0.05, **ingest})


@pytest.mark.pg_versions
def test_sigkill_and_postgres_restart_lose_and_duplicate_nothing(source, pg_server, tmp_path):
    dsn = source.source.dsn
    config_path = kill_loop_config(source, tmp_path, batch_rows=200)

    stop = threading.Event()
    result = {}
    worker = threading.Thread(target=lambda: result.update(commits=workload(dsn, stop, 1)))
    worker.start()
    rng = random.Random(2)
    kills = 0
    try:
        for round_ in range(8):
            proc = start_lakehouse(config_path, "-q", "ingest", stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
            time.sleep(rng.uniform(0.6, 1.6))
            if round_ == 4:  # a Postgres restart while the ingest streams
                wait_until_streaming(dsn)  # a first connect fails fast by design
                pg_server.stop()
                pg_server.start()
                time.sleep(rng.uniform(0.5, 1.5))
            assert proc.poll() is None, proc.stderr.read().decode()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
    finally:
        stop.set()
        worker.join(30)
    final = start_lakehouse(config_path, "-q", "ingest", "--until-idle", "1.5",
                            stderr=subprocess.PIPE)
    assert final.wait(60) == 0, final.stderr.read().decode()

    expected = reference_positions(dsn)
    landed = bronze(source)
    positions = [(r["commit_lsn"], r["change_index"]) for r in landed]
    assert len(positions) == len(set(positions)), "a position landed twice"
    actual = [(r["commit_lsn"], r["change_index"], r["op"],
               tuple(r["values"]) if r["op"] != "delete" else (r["old_values"][0],))
              for r in landed]
    assert kills == 8 and result["commits"] > 50
    assert len(expected) > 500
    assert actual == expected


@pytest.mark.pg_versions
def test_kill_inside_a_partly_landed_transaction_resumes_at_the_next_change(source, tmp_path):
    """A transaction bigger than a bronze batch lands in pieces; a crash between pieces
    must resume at the next change, not at the transaction's start."""

    dsn = source.source.dsn
    config_path = write_config(tmp_path / "lakehouse.yml", dsn, source.lake.path,
                               ["public.items"], ingest={"batch_rows": 500, "batch_seconds": 5})
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO items (id, name) SELECT g, 'n' FROM generate_series(1, 30000) g")
    proc = start_lakehouse(config_path, "-q", "ingest", stderr=subprocess.PIPE)
    bronze_path = Lake.from_config(source).bronze_changes.uri
    deadline = time.monotonic() + 60
    landed = 0
    while time.monotonic() < deadline and not 0 < landed < 20000:
        time.sleep(0.05)
        try:
            landed = read_delta(bronze_path, ["commit_lsn"]).num_rows
        except Exception:  # table not created yet
            landed = 0
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 0 < landed < 30000, "the kill was meant to land inside the transaction"
    with psycopg.connect(dsn) as conn:
        confirmed = conn.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                 "WHERE slot_name = 'lakehouse'").fetchone()[0]
        current = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    assert confirmed < current  # nothing of the open transaction was confirmed
    final = start_lakehouse(config_path, "-q", "ingest", "--until-idle", "1",
                            stderr=subprocess.PIPE)
    assert final.wait(120) == 0, final.stderr.read().decode()
    rows = bronze(source)
    assert [r["change_index"] for r in rows] == list(range(30000))
    assert [int(r["values"][0]) for r in rows] == list(range(1, 30001))


@pytest.mark.pg_versions
def test_sigkill_while_large_transactions_stream_in(source, pg_server, tmp_path):
    """Transactions past logical_decoding_work_mem stream in (protocol v2) and become
    bronze files before their commit; kills land between files, before and after their
    commit, and in replays that land through the batch path."""
    kill_while_streaming(source, pg_server, tmp_path)


def test_sigkill_while_large_transactions_stream_in_with_the_lake_on_s3(s3_source, pg_server,
                                                                         tmp_path):
    """The same on S3, where a streamed transaction's files are spilled to local disk
    and read back at its commit (an object cannot be patched in place)."""
    kill_while_streaming(s3_source, pg_server, tmp_path)


def wait_streaming(dsn: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until the ingest process holds the slot."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not conn.execute("SELECT active FROM pg_replication_slots "
                               "WHERE slot_name = 'lakehouse'").fetchone()[0]:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the ingest never started streaming"
            time.sleep(0.05)


def streamed_transactions(dsn: str, wait: float = 15) -> int:
    """The slot's streamed transactions, once the server has published its statistics
    (a walsender reports them at exit; under load that lags)."""
    deadline = time.monotonic() + wait
    while True:
        with psycopg.connect(dsn) as conn:
            streamed = conn.execute("SELECT stream_txns FROM pg_stat_replication_slots "
                                    "WHERE slot_name = 'lakehouse'").fetchone()[0]
        if streamed > 5 or time.monotonic() > deadline:
            return streamed
        time.sleep(0.5)


def kill_while_streaming(source: Config, pg_server, tmp_path) -> None:
    dsn = source.source.dsn
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET logical_decoding_work_mem = '64kB'")
        conn.execute("SELECT pg_reload_conf()")
    config_path = kill_loop_config(source, tmp_path, batch_rows=300, spill_rows=100)

    stop = threading.Event()
    result = {}
    # Paced: the kills need large transactions in flight, not a backlog. Unpaced, a fast
    # server outruns 300-row commits to S3, and the final drain grows with its speed.
    worker = threading.Thread(target=lambda: result.update(
        commits=workload(dsn, stop, 3, changes=(200, 1500), name="v" * 200, pause=1.0)))
    worker.start()
    rng = random.Random(4)
    try:
        for _ in range(6):
            proc = start_lakehouse(config_path, "-q", "ingest", stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
            wait_streaming(dsn, proc)  # startup (checks, a lake on S3) takes its own time
            time.sleep(rng.uniform(0.8, 2.0))
            assert proc.poll() is None, proc.stderr.read().decode()
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    finally:
        stop.set()
        worker.join(30)
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET logical_decoding_work_mem")
            conn.execute("SELECT pg_reload_conf()")
    final = start_lakehouse(config_path, "-q", "ingest", "--until-idle", "1.5",
                            stderr=subprocess.PIPE)
    assert final.wait(120) == 0, final.stderr.read().decode()

    streamed = streamed_transactions(dsn)
    expected = reference_positions(dsn)
    landed = bronze(source)
    actual = [(r["commit_lsn"], r["change_index"], r["op"],
               tuple(r["values"]) if r["op"] != "delete" else (r["old_values"][0],))
              for r in landed]
    assert streamed > 5 and result["commits"] > 5
    assert actual == expected
