"""Failover on real servers: a primary and its physical standby (`pg_basebackup -R`).

1. Asynchronous standby, no failover slot: the ingest lands transactions the standby
   never received, the primary dies, the standby is promoted and takes writes. The
   pipeline refuses to go on (exit 3), `recover` starts a new slot generation whose
   positions sort after bronze although the new primary's LSNs are lower, the resync
   removes what only the dead primary had, and silver equals the new primary.
2. Postgres 18 failover slot with `synchronized_standby_slots`: after the promotion the
   ingest continues on the synced slot, no resync, and silver equals the new primary.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from pipelines.backfill.runner import BackfillOptions, run_backfill
from pipelines.bronze.generations import Registry
from pipelines.config import Config
from pipelines.embedded_pg import EmbeddedPostgres, bin_dir, free_port
from pipelines.bronze.landed import landed_lsn
from pipelines.positions import parse_lsn
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from pipelines.lake import Lake
from pipelines.recover.run import run_recover
from pipelines.silver.job import run_silver
from pipelines.source.lineage import LineageBroken
from pipelines.source.setup import run_setup
from pipelines.verify.run import run_verify
from tests.support.cli import lakehouse
from tests.support.config import make_config, write_config

pytestmark = [pytest.mark.postgres, pytest.mark.spark]

DB = "app"
TABLE_SQL = ("CREATE TABLE accounts (id int PRIMARY KEY, name text, balance int);"
             "INSERT INTO accounts SELECT g, 'a' || g, g FROM generate_series(1, 100) g")


@pytest.fixture
def servers(pg_server: EmbeddedPostgres) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="lakehouse-failover-"))
    base.chmod(0o755)  # under root the servers run as an unprivileged user
    started: list[EmbeddedPostgres] = []
    yield base, started
    for server in started:
        server.stop()
    shutil.rmtree(base, ignore_errors=True)


def config_for(server: EmbeddedPostgres, lake: Path) -> Config:
    return make_config(server.dsn(DB), lake, ["public.accounts"], base_dir=lake.parent,
                       ingest={"batch_seconds": 0.1})


def sql(server: EmbeddedPostgres, *statements: str, db: str = DB) -> None:
    with psycopg.connect(server.dsn(db), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def wal_lsn(server: EmbeddedPostgres) -> int:
    with psycopg.connect(server.dsn(DB)) as conn:
        return parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def catch_up(config: Config, server: EmbeddedPostgres) -> None:
    run_ingest(config, IngestOptions(until_lsn=wal_lsn(server)), StopRequested())


def wait_replayed(primary: EmbeddedPostgres, standby: EmbeddedPostgres) -> None:
    target = wal_lsn(primary)
    deadline = time.monotonic() + 60
    with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:
        while parse_lsn(conn.execute(
                "SELECT pg_last_wal_replay_lsn()::text").fetchone()[0]) < target:
            assert time.monotonic() < deadline, "the standby did not catch up"
            time.sleep(0.05)


def rows(server: EmbeddedPostgres) -> list[tuple]:
    with psycopg.connect(server.dsn(DB)) as conn:
        return conn.execute("SELECT id, name, balance FROM accounts ORDER BY id").fetchall()


def start_primary(base: Path, started: list, binaries: Path,
                  settings: dict[str, str] | None = None) -> EmbeddedPostgres:
    primary = EmbeddedPostgres(base / "primary", free_port(), binaries=binaries)
    started.append(primary.start(settings))
    sql(primary, f"CREATE DATABASE {DB}", db="postgres")
    sql(primary, TABLE_SQL)
    return primary


@pytest.mark.pg_versions  # the others start Postgres 18 themselves
def test_failover_to_a_standby_that_missed_transactions_recovers_in_place(
        servers, pg_server, spark, tmp_path):
    base, started = servers
    primary = start_primary(base, started, pg_server.binaries)
    lake = tmp_path / "lake"
    config = config_for(primary, lake)
    run_setup(config.source, Lake.from_config(config))
    run_backfill(config, BackfillOptions())
    standby = primary.base_backup(base / "standby", free_port())
    started.append(standby.start())
    sql(primary, "UPDATE accounts SET balance = balance + 1000 WHERE id <= 10")
    wait_replayed(primary, standby)
    standby.stop()  # from here on the standby receives nothing: asynchronous replication

    sql(primary, "DELETE FROM accounts WHERE id BETWEEN 11 AND 20",
        "UPDATE accounts SET name = 'lost' WHERE id BETWEEN 1 AND 5",
        "INSERT INTO accounts SELECT g, 'only-on-primary', 0 FROM generate_series(500, 20500) g")
    catch_up(config, primary)  # bronze holds transactions the standby never received
    run_silver(config, spark)
    held = landed_lsn(Lake.from_config(config).bronze_changes, "lakehouse")
    subprocess.run([str(primary.binaries / "pg_ctl"), "stop", "-m", "immediate", "-D",
                    str(primary.data_dir)], capture_output=True,
                   user=primary.data_dir.stat().st_uid)  # the primary dies

    standby.start()
    standby.promote()
    sql(standby, "UPDATE accounts SET balance = -1 WHERE id IN (1, 30)",
        "INSERT INTO accounts VALUES (600, 'after promotion', 6)")
    assert wal_lsn(standby) < held  # the new primary's positions are behind bronze's
    config = config_for(standby, lake)  # the operator points the config at the new primary

    with pytest.raises(LineageBroken, match="lakehouse recover"):
        run_ingest(config, IngestOptions(until_idle=0.5), StopRequested())
    path = write_config(tmp_path / "lakehouse.yml", standby.dsn(DB), lake, ["public.accounts"])
    done = lakehouse(path, "status", check=False)
    assert done.returncode == 3 and "lakehouse recover" in done.stdout, done.stdout

    report = run_recover(config)
    assert report.generation.generation == 1 and report.generation.lsn_offset > 0
    sql(standby, "UPDATE accounts SET name = 'during resync' WHERE id = 2")
    run_backfill(config, BackfillOptions())  # the scheduled resync
    catch_up(config, standby)
    run_silver(config, spark)
    assert all(d.equal for d in run_verify(config, spark, wait_seconds=10))
    silver = {r[0]: r for r in spark.read.format("delta").load(
        Lake.from_config(config).silver("public", "accounts").uri)
        .select("id", "name", "balance").collect()}
    assert {r[0]: tuple(r) for r in rows(standby)} == {k: tuple(v) for k, v in silver.items()}
    assert 500 not in silver and 15 in silver and silver[3][1] == "a3"


def test_postgres_18_failover_slot_continues_after_promotion_without_resync(
        servers, spark, tmp_path):
    base, started = servers
    binaries = bin_dir(18)
    primary = start_primary(base, started, binaries)
    lake = tmp_path / "lake"
    config = config_for(primary, lake)
    run_setup(config.source, Lake.from_config(config))
    run_backfill(config, BackfillOptions())
    standby = primary.base_backup(base / "standby", free_port(), slot="standby1")
    started.append(standby.start({"sync_replication_slots": "on",
                                  "hot_standby_feedback": "on"}))
    # The logical walsender waits for the standby before it sends a change (so the
    # ingest never lands a transaction the standby lacks).
    primary.start({"synchronized_standby_slots": "standby1"})
    sql(primary, "UPDATE accounts SET balance = 7 WHERE id <= 10",
        "DELETE FROM accounts WHERE id BETWEEN 90 AND 95")
    catch_up(config, primary)
    wait_replayed(primary, standby)
    deadline = time.monotonic() + 60
    with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:
        while not conn.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = "
                               "'lakehouse' AND synced AND NOT temporary").fetchone()[0]:
            assert time.monotonic() < deadline, "the failover slot was not synced"
            time.sleep(0.2)
    primary.stop()

    standby.promote()
    sql(standby, "UPDATE accounts SET name = 'after promotion' WHERE id = 1",
        "DELETE FROM accounts WHERE id = 2")
    config = config_for(standby, lake)
    catch_up(config, standby)  # no recover: the synced slot continues
    generations = Registry(Lake.from_config(config)).all()
    assert [g.generation for g in generations] == [0, 0]  # the same lineage, a new timeline
    assert generations[-1].timeline == 2
    run_silver(config, spark)
    assert all(d.equal for d in run_verify(config, spark, wait_seconds=10))


def test_postgres_18_publishes_stored_generated_columns_to_silver(servers, spark, tmp_path):
    """Before 18 a STORED generated column never reaches the slot (nor the snapshot):
    silver lacks it. On 18 setup publishes it and both paths carry it."""
    base, started = servers
    primary = start_primary(base, started, bin_dir(18))
    sql(primary, "ALTER TABLE accounts ADD COLUMN doubled int "
                 "GENERATED ALWAYS AS (balance * 2) STORED")
    config = config_for(primary, tmp_path / "lake")
    run_setup(config.source, Lake.from_config(config))
    run_backfill(config, BackfillOptions())  # the 100 rows older than the slot
    sql(primary, "UPDATE accounts SET balance = 50 WHERE id = 1",
        "INSERT INTO accounts (id, name, balance) VALUES (700, 'new', 7)")
    catch_up(config, primary)
    run_silver(config, spark)
    silver = {r.id: r.doubled for r in spark.read.format("delta").load(
        Lake.from_config(config).silver("public", "accounts").uri).collect()}
    assert silver[1] == 100 and silver[700] == 14 and silver[42] == 84
    assert all(d.equal for d in run_verify(config, spark, wait_seconds=10))
