"""Recovery in place on real servers: a slot dropped or invalidated while a workload runs,
detected (exit 3), `recover`ed, resynced, and silver equal to the source again; a resync
that repairs planted differences."""

from __future__ import annotations

import random
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest
from deltalake import write_deltalake

from pipelines.backfill.runner import BackfillOptions, run_backfill
from pipelines.bronze.generations import Registry
from pipelines.config import Config
from pipelines.errors import SourceError
from pipelines.positions import parse_lsn
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from pipelines.lake import Lake, read_delta
from pipelines.recover.run import run_recover
from pipelines.silver.job import run_silver
from pipelines.source.lineage import LineageBroken
from pipelines.source.setup import run_setup
from pipelines.verify.run import run_verify
from tests.support.cli import lakehouse
from tests.support.config import make_config, write_config
from tests.support.ingest import FAST_INGEST, ingest
from tests.support.slots import drop_slot, invalidate_slot

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.pg_versions]

TABLES = ("public.accounts", "public.pairs")


@pytest.fixture
def config(source_dsn, tmp_path) -> Config:
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, name text, balance int)")
        conn.execute("CREATE TABLE pairs (a int, b int, v text, PRIMARY KEY (a, b))")
        conn.execute("INSERT INTO accounts SELECT g, 'a' || g, g FROM generate_series(1, 150) g")
        conn.execute("INSERT INTO pairs SELECT g % 7, g, 'v' || g FROM generate_series(1, 60) g")
    config = make_config(source_dsn, tmp_path / "lake", TABLES, base_dir=tmp_path,
                         ingest=FAST_INGEST, backfill={"chunk_size": 40})
    run_setup(config.source, Lake.from_config(config))
    run_backfill(config, BackfillOptions(chunk_size=40))  # rows older than the slot
    ingest(config)
    return config


class Workload:
    """Random inserts, updates, key changes and deletes until stopped."""

    def __init__(self, dsn: str, seed: int) -> None:
        self.dsn, self.rng = dsn, random.Random(seed)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.next_id = 100_000 * seed

    def _run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    self.step(conn)
                    time.sleep(0.005)
        except BaseException as exc:  # raised by `__exit__` in the test's thread
            self.error = exc

    def step(self, conn: psycopg.Connection) -> None:
        rng, pick = self.rng, self.rng.randint(1, 200)
        kind = rng.random()
        if kind < 0.3:
            self.next_id += 1
            conn.execute("INSERT INTO accounts VALUES (%s, 'new', 0)", (self.next_id,))
        elif kind < 0.6:
            conn.execute("UPDATE accounts SET balance = balance + 1, name = %s WHERE id = %s",
                         (f"u{rng.randint(0, 9)}", pick))
        elif kind < 0.7:
            self.next_id += 1
            conn.execute("UPDATE accounts SET id = %s WHERE id = %s", (self.next_id, pick))
        elif kind < 0.85:
            conn.execute("DELETE FROM accounts WHERE id = %s", (pick,))
        else:
            conn.execute("UPDATE pairs SET v = %s WHERE a = %s", (f"w{pick}", pick % 7))
            conn.execute("DELETE FROM pairs WHERE b = %s", (pick % 60,))

    def __enter__(self) -> "Workload":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        if self.error:
            raise self.error


class Ingest:
    """run_ingest in a thread until stopped; keeps how it ended."""

    def __init__(self, config: Config) -> None:
        self.stop = StopRequested()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(config,), daemon=True)
        self.thread.start()

    def _run(self, config: Config) -> None:
        try:
            run_ingest(config, IngestOptions(), self.stop)
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 60) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the ingest did not stop"

    def finish(self) -> None:
        self.stop.event.set()
        self.join()
        if self.error:
            raise self.error


def catch_up(config: Config) -> None:
    """Ingest until bronze holds everything the source has committed."""
    with psycopg.connect(config.source.dsn) as conn:
        target = parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    run_ingest(config, IngestOptions(until_lsn=target), StopRequested())


def cli(config: Config, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = write_config(tmp_path / "lakehouse.yml", config.source.dsn, config.lake.path, TABLES)
    return lakehouse(path, *args, check=False)


def recover_and_converge(config: Config, spark, tmp_path: Path, seed: int) -> None:
    """What the operator does after the loss is reported: recover, ingest + resync
    under load, silver; then silver must equal the source."""
    report = run_recover(config)
    assert report.problem is not None and report.generation.generation == 1
    assert report.generation.resync_tables == TABLES
    status = cli(config, tmp_path, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "resync public.accounts: scheduled" in status.stdout
    with Workload(config.source.dsn, seed):
        running = Ingest(config)
        time.sleep(0.5)
        results = run_backfill(config, BackfillOptions(chunk_size=40))
        assert [r.status for r in results] == ["done", "done"]
        time.sleep(0.5)
    running.finish()
    catch_up(config)
    run_silver(config, spark)
    diffs = run_verify(config, spark, wait_seconds=10)
    assert [(d.table, d.equal) for d in diffs] == [(t, True) for t in TABLES], diffs
    status = cli(config, tmp_path, "status").stdout
    assert "scheduled" not in status and "resync public.pairs: done" in status, status


@pytest.mark.long
def test_a_slot_dropped_under_load_is_detected_and_recovered_in_place(config, spark, tmp_path):
    run_silver(config, spark)
    with Workload(config.source.dsn, seed=1):
        running = Ingest(config)
        time.sleep(1.0)
        drop_slot(config.source.dsn)  # while the ingest streams and the workload writes
        running.join()
        time.sleep(0.5)  # changes no slot captures: deletes among them
    assert isinstance(running.error, (LineageBroken, SourceError))
    assert "lakehouse recover" in str(running.error)

    with pytest.raises(LineageBroken, match="is missing, but bronze holds changes"):
        run_setup(config.source, Lake.from_config(config))
    for verb in ("setup", "ingest", "status"):
        done = cli(config, tmp_path, verb, *(["--until-idle", "1"] if verb == "ingest" else []))
        assert done.returncode == 3, (verb, done.stdout, done.stderr)
        assert "lakehouse recover" in done.stdout + done.stderr, verb

    recover_and_converge(config, spark, tmp_path, seed=2)
    again = run_recover(config)
    assert again.problem is None and again.generation.generation == 1


def test_an_invalidated_slot_is_detected_and_recovered_in_place(config, spark, tmp_path):
    with psycopg.connect(config.source.dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM accounts WHERE id <= 20")  # never captured: the slot is lost
        conn.execute("UPDATE accounts SET id = id + 5000 WHERE id BETWEEN 21 AND 30")
    with Workload(config.source.dsn, seed=4):  # writes while the server drops WAL
        invalidate_slot(config.source.dsn)
    with pytest.raises((LineageBroken, SourceError), match="lakehouse recover"):
        ingest(config)
    done = cli(config, tmp_path, "status")
    assert done.returncode == 3 and "lakehouse recover" in done.stdout + done.stderr
    recover_and_converge(config, spark, tmp_path, seed=3)
    silver = read_delta(Lake.from_config(config).silver("public", "accounts"), ["id"])
    assert not set(range(1, 31)) & set(silver.column("id").to_pylist())


def test_resync_repairs_extra_missing_and_different_rows(config, spark):
    run_silver(config, spark)
    path = Lake.from_config(config).silver("public", "accounts")
    table = read_delta(path)
    rows = {r["id"]: r for r in table.to_pylist()}
    rows.pop(5)  # missing
    rows[6]["name"] = "planted"  # different
    rows[99999] = {**rows[7], "id": 99999}  # extra
    write_deltalake(path.uri, table.from_pylist(list(rows.values()), schema=table.schema),
                    mode="overwrite")
    assert not all(d.equal for d in run_verify(config, spark, wait_seconds=10))

    for _ in range(2):  # the second resync changes nothing
        results = run_backfill(config, BackfillOptions(tables=("public.accounts",),
                                                       resync=True, chunk_size=40))
        assert [r.status for r in results] == ["done"]
        catch_up(config)
        run_silver(config, spark)
        diffs = run_verify(config, spark, wait_seconds=10)
        assert all(d.equal for d in diffs), diffs
    assert [g.generation for g in Registry(Lake.from_config(config)).all()] == [0]
