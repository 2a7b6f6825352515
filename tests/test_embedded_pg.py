"""Physical standbys of the embedded server, on the --postgres version: what failover tests
build on."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import psycopg
import pytest

from pipelines.embedded_pg import EmbeddedPostgres, bin_dir, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.pg_versions]


@pytest.fixture
def primary(postgres_version: int) -> Iterator[EmbeddedPostgres]:
    """A primary of its own (the tests promote its standbys), stopped with them afterwards."""
    base = Path(tempfile.mkdtemp(prefix="lakehouse-test-standby-"))
    base.chmod(0o755)  # under root the server runs as an unprivileged user
    server = EmbeddedPostgres(base / "primary", free_port(),
                              binaries=bin_dir(postgres_version)).start()
    yield server
    for data_dir in base.iterdir():
        EmbeddedPostgres(data_dir, 0, binaries=server.binaries).stop()
    shutil.rmtree(base, ignore_errors=True)


def test_standby_replays_the_primary_and_takes_writes_once_promoted(primary):
    standby = primary.base_backup(primary.data_dir.parent / "standby", free_port()).start()
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        conn.execute("INSERT INTO notes VALUES (1, 'before failover')")
        written = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]

    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        wait_for(lambda: conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                      (written,)).fetchone()[0])
        assert conn.execute("SELECT body FROM notes").fetchall() == [("before failover",)]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO notes VALUES (2, 'refused')")

    primary.stop()
    standby.promote()
    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        conn.execute("INSERT INTO notes VALUES (2, 'after failover')")
        assert conn.execute("SELECT id FROM notes ORDER BY id").fetchall() == [(1,), (2,)]


def test_failover_slot_is_synchronised_to_the_standby_and_usable_after_promotion(
        primary, postgres_version):
    if postgres_version < 17:
        pytest.skip("slot synchronisation to standbys is new in PostgreSQL 17")
    standby = primary.base_backup(primary.data_dir.parent / "standby", free_port(),
                                  slot="standby").start({"sync_replication_slots": "on",
                                                         "hot_standby_feedback": "on"})
    primary.start({"synchronized_standby_slots": "standby"})  # running: reloaded
    with psycopg.connect(primary.dsn(), autocommit=True) as conn, \
            psycopg.connect(standby.dsn(), autocommit=True) as on_standby:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY)")
        conn.execute("CREATE PUBLICATION lakehouse FOR TABLE notes")
        conn.execute("SELECT pg_create_logical_replication_slot('lake', 'pgoutput', "
                     "failover => true)")

        def synced() -> bool:
            # The standby keeps its copy temporary until the primary's slot has moved
            # past where the standby's own WAL and catalog horizon begin.
            conn.execute("SELECT pg_log_standby_snapshot()")
            conn.execute("SELECT pg_replication_slot_advance('lake', pg_current_wal_lsn())")
            return on_standby.execute("SELECT EXISTS (SELECT FROM pg_replication_slots "
                                      "WHERE slot_name = 'lake' AND synced "
                                      "AND NOT temporary)").fetchone()[0]

        wait_for(synced)
        conn.execute("INSERT INTO notes VALUES (1)")
        written = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        wait_for(lambda: on_standby.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                            (written,)).fetchone()[0])

    primary.stop()
    standby.promote()
    with psycopg.connect(standby.dsn(), autocommit=True) as conn:
        changes = conn.execute(
            "SELECT data FROM pg_logical_slot_get_binary_changes('lake', NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'lakehouse')").fetchall()
    assert [bytes(data[:1]) for (data,) in changes] == [b"B", b"R", b"I", b"C"]


def wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the standby"
        time.sleep(0.05)
