"""End to end into bronze: real Postgres, real replication slot, real Delta table."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from pipelines.ingest.replication import ReplicationStream
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from tests.support.ingest import bronze, execute, ingest
from tests.support.slots import drop_slot

pytestmark = [pytest.mark.postgres, pytest.mark.pg_versions]


def test_common_types_land_as_postgres_text(source):
    dsn = source.source.dsn
    execute(dsn, """INSERT INTO items VALUES (1, -2, 40000, 12345.678, 0.1, 1.5, true,
        'naïve "quoted", text', 'ab', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-02-28',
        '2026-02-28 13:14:15.123456', '2026-02-28 13:14:15+05:30', '{"a": [1, null]}',
        '\\x00ff', '{a,"b c",NULL,""}', '{1,2,NULL}', 'happy', NULL)""")
    ingest(source)
    [row] = bronze(source)
    values = dict(zip(row["columns"], row["values"]))
    assert values == {
        "id": "1", "i2": "-2", "i4": "40000", "amount": "12345.678", "ratio": "0.1",
        "f4": "1.5", "flag": "t", "name": 'naïve "quoted", text', "code": "ab",
        "ident": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "day": "2026-02-28",
        "at": "2026-02-28 13:14:15.123456", "at_tz": "2026-02-28 07:44:15+00",
        "doc": '{"a": [1, null]}', "raw": "\\x00ff", "tags": '{a,"b c",NULL,""}',
        "nums": "{1,2,NULL}", "feeling": "happy", "body": None}
    types = dict(zip(row["columns"], row["type_names"]))
    assert types["amount"] == "numeric" and types["tags"] == "_text"
    assert types["feeling"] == "mood"  # enum name from pgoutput's Type message
    mods = dict(zip(row["columns"], row["type_mods"]))
    assert mods["amount"] == (12 << 16 | 3) + 4 and mods["code"] == 8 + 4
    assert row["key_columns"] == ["id"] and row["op"] == "insert"
    assert row["schema_name"] == "public" and row["table_name"] == "items"
    assert row["commit_ts"] is not None and row["xid"] > 0


def test_builtin_type_names_match_the_server(source):
    from pipelines.ingest.relations import BUILTIN_TYPE_NAMES

    with psycopg.connect(source.source.dsn) as conn:
        server = dict(conn.execute("SELECT oid::int, typname FROM pg_type WHERE oid = ANY(%s)",
                                   (list(BUILTIN_TYPE_NAMES),)).fetchall())
    assert server == BUILTIN_TYPE_NAMES


def test_update_delete_truncate_key_change_toast_and_positions(source):
    dsn = source.source.dsn
    big = "x" * 10_000  # stored out of line (STORAGE EXTERNAL): TOASTed
    execute(dsn, f"INSERT INTO items (id, name, body) VALUES (1, 'a', '{big}'), (2, 'b', 'short')",
            "INSERT INTO members VALUES (1, 1, 'owner'), (1, 2, 'dev')")
    execute(dsn, "UPDATE items SET name = 'a2' WHERE id = 1")        # body unchanged: TOAST
    execute(dsn, "UPDATE items SET name = NULL WHERE id = 2")        # NULL, not unchanged
    execute(dsn, "UPDATE members SET member = 3 WHERE member = 2")   # key change
    execute(dsn, "DELETE FROM items WHERE id = 2")
    execute(dsn, "TRUNCATE members, items")
    ingest(source)
    rows = bronze(source)
    summary = [(r["op"], r["table_name"], r["change_index"]) for r in rows]
    assert summary == [
        ("insert", "items", 0), ("insert", "items", 1),
        ("insert", "members", 2), ("insert", "members", 3),
        ("update", "items", 0), ("update", "items", 0), ("update", "members", 0),
        ("delete", "items", 0), ("truncate", "members", 0), ("truncate", "items", 1)]
    lsns = [r["commit_lsn"] for r in rows]
    assert lsns == sorted(lsns) and len(set(lsns)) == 6  # one commit LSN per transaction
    first_update, null_update, key_change, delete = rows[4], rows[5], rows[6], rows[7]
    body = first_update["columns"].index("body")
    assert first_update["unchanged_toast"] == ["body"] and first_update["values"][body] is None
    assert null_update["unchanged_toast"] == [] and null_update["values"][7] is None
    assert key_change["old_kind"] == "K" and key_change["old_values"][:2] == ["1", "2"]
    assert key_change["values"] == ["1", "3", "dev"]
    assert key_change["key_columns"] == ["project", "member"]
    assert delete["old_kind"] == "K" and delete["old_values"][0] == "2"
    assert rows[8]["truncate_cascade"] is False


def test_logical_messages_and_unpublished_tables(source):
    dsn = source.source.dsn
    execute(dsn, "SELECT pg_logical_emit_message(true, 'lakehouse.watermark', '{\"k\": 1}')",
            "INSERT INTO unpublished VALUES (1, 'ignored')")
    execute(dsn, "SELECT pg_logical_emit_message(false, 'other', '\\x01'::bytea)")
    ingest(source)
    rows = bronze(source)
    assert [(r["op"], r["message_prefix"], r["message_transactional"]) for r in rows] == [
        ("message", "lakehouse.watermark", True), ("message", "other", False)]
    assert rows[0]["message_content"] == b'{"k": 1}' and rows[1]["message_content"] == b"\x01"


def test_bronze_order_follows_commit_order_of_interleaved_transactions(source):
    dsn = source.source.dsn
    first, second = psycopg.connect(dsn), psycopg.connect(dsn)
    first.execute("INSERT INTO items (id, name) VALUES (10, 'began first')")
    second.execute("INSERT INTO items (id, name) VALUES (20, 'began second')")
    first.execute("INSERT INTO items (id, name) VALUES (11, 'began first')")
    second.commit()
    first.commit()
    first.close(), second.close()
    ingest(source)
    assert [r["values"][0] for r in bronze(source)] == ["20", "10", "11"]


def test_slot_advances_when_only_unpublished_tables_change(source):
    dsn = source.source.dsn
    execute(dsn, "INSERT INTO items (id) VALUES (1)")
    ingest(source)
    for i in range(5):
        execute(dsn, f"INSERT INTO unpublished VALUES ({i}, 'x')")
    with psycopg.connect(dsn) as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    ingest(source)
    with psycopg.connect(dsn) as conn:
        confirmed, behind = conn.execute(
            "SELECT confirmed_flush_lsn, confirmed_flush_lsn < %s FROM pg_replication_slots "
            "WHERE slot_name = 'lakehouse'", (target,)).fetchone()
    assert not behind, f"slot stuck at {confirmed}, WAL at {target}"
    assert len(bronze(source)) == 1


def test_a_new_connection_never_moves_the_slot_back(source):
    """The slot may be past bronze's end (WAL of unpublished tables confirmed while idle);
    a connection that starts from bronze's end must not report less than the slot has."""
    dsn = source.source.dsn
    execute(dsn, "INSERT INTO items (id) VALUES (1)")
    end = ingest(source).confirmed_lsn  # bronze's end
    execute(dsn, "INSERT INTO unpublished VALUES (1, 'x')")
    with psycopg.connect(dsn, autocommit=True) as conn:
        ahead = conn.execute("SELECT pg_replication_slot_advance('lakehouse', "
                             "pg_current_wal_lsn())").fetchone()[0][1]
    stream = ReplicationStream(dsn, source.source.slot, source.source.publication, end)
    stream.confirm(end)
    stream.close()
    with psycopg.connect(dsn) as conn:
        while conn.execute("SELECT active FROM pg_replication_slots "
                           "WHERE slot_name = 'lakehouse'").fetchone()[0]:
            time.sleep(0.05)  # the walsender applies the status before it exits
        confirmed = conn.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                 "WHERE slot_name = 'lakehouse'").fetchone()[0]
    assert confirmed == ahead


def test_restart_resumes_exactly_and_confirms_only_landed_transactions(source):
    dsn = source.source.dsn
    execute(dsn, "INSERT INTO items (id) VALUES (1)")
    ingest(source)
    execute(dsn, "INSERT INTO items (id) VALUES (2)")
    execute(dsn, "INSERT INTO items (id) VALUES (3)")
    ingest(source)
    ingest(source)  # nothing new: lands nothing twice
    assert [r["values"][0] for r in bronze(source)] == ["1", "2", "3"]


def test_large_streamed_transaction_and_aborts(source, pg_server):
    """Past logical_decoding_work_mem the server streams (v2); aborts must vanish."""
    dsn = source.source.dsn
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET logical_decoding_work_mem = '64kB'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        with psycopg.connect(dsn) as conn:
            conn.execute("INSERT INTO items (id, name) SELECT g, 'row ' || g "
                         "FROM generate_series(1, 3000) g")
            conn.execute("SAVEPOINT s")
            conn.execute("INSERT INTO items (id, name) SELECT g, 'rolled back' "
                         "FROM generate_series(5001, 6000) g")
            conn.execute("ROLLBACK TO SAVEPOINT s")
            conn.execute("UPDATE items SET name = 'updated' WHERE id <= 1000")
        with psycopg.connect(dsn) as conn:  # a whole streamed transaction rolled back
            conn.execute("INSERT INTO items (id) SELECT g FROM generate_series(7001, 9000) g")
            conn.rollback()
        import dataclasses

        small_spill = dataclasses.replace(source, ingest=dataclasses.replace(
            source.ingest, spill_rows=500))  # forces the on-disk spill path
        ingest(small_spill)
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET logical_decoding_work_mem")
            conn.execute("SELECT pg_reload_conf()")
    rows = bronze(source)
    assert len(rows) == 4000
    assert [r["change_index"] for r in rows] == list(range(4000))
    assert len({r["commit_lsn"] for r in rows}) == 1
    assert all(r["values"][7] != "rolled back" for r in rows)
    assert sum(r["op"] == "update" for r in rows) == 1000


def test_stopping_while_a_transaction_streams_in_leaves_no_files_behind(source, pg_server):
    """The open stream's files are not committed: a stop deletes them, and the resent
    transaction lands once after its commit."""
    import dataclasses

    from deltalake import DeltaTable

    dsn = source.source.dsn
    small_spill = dataclasses.replace(source, ingest=dataclasses.replace(
        source.ingest, spill_rows=200))
    table = Path(source.lake.path, "bronze", "changes")
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET logical_decoding_work_mem = '64kB'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        execute(dsn, "INSERT INTO items (id) VALUES (0)")  # bronze exists before the stream
        ingest(small_spill)
        with psycopg.connect(dsn) as open_txn:
            open_txn.execute("INSERT INTO items (id, name) SELECT g, 'row ' || g "
                             "FROM generate_series(1, 3000) g")
            stop = StopRequested()
            worker = threading.Thread(target=run_ingest,
                                      args=(small_spill, IngestOptions(), stop))
            worker.start()
            referenced = {u.rsplit("/", 1)[-1] for u in DeltaTable(str(table)).file_uris()}
            deadline = time.monotonic() + 30
            while len(list(table.glob("*.parquet"))) <= len(referenced):  # files pending
                assert time.monotonic() < deadline, "the open transaction never streamed in"
                time.sleep(0.05)
            stop.event.set()  # what SIGTERM does
            worker.join(30)
            assert {f.name for f in table.glob("*.parquet")} == referenced
            open_txn.commit()
        ingest(small_spill)
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET logical_decoding_work_mem")
            conn.execute("SELECT pg_reload_conf()")
    assert [r["values"][0] for r in bronze(source)] == [str(i) for i in range(3001)]


def test_busy_slot_is_a_clear_source_error(source):
    from pipelines.errors import SourceError
    from pipelines.ingest.replication import ReplicationStream

    holder = ReplicationStream(source.source.dsn, "lakehouse", "lakehouse", 0)
    try:
        with pytest.raises(SourceError, match="another ingest is streaming"):
            ingest(source)
    finally:
        holder.close()


def test_reconnects_after_the_connection_is_killed(source):
    dsn = source.source.dsn
    stop = StopRequested()
    result = {}
    worker = threading.Thread(target=lambda: result.update(
        report=run_ingest(source, IngestOptions(), stop)))
    worker.start()
    try:
        execute(dsn, "INSERT INTO items (id) VALUES (1)")
        _wait_for_rows(source, 1)
        with psycopg.connect(dsn, autocommit=True) as conn:
            killed = conn.execute("SELECT pg_terminate_backend(active_pid) FROM "
                                  "pg_replication_slots WHERE slot_name = 'lakehouse'").fetchone()
        assert killed == (True,)
        execute(dsn, "INSERT INTO items (id) VALUES (2)")
        _wait_for_rows(source, 2, timeout=15)
    finally:
        stop.event.set()
        worker.join(30)
    assert not worker.is_alive()
    assert [r["values"][0] for r in bronze(source)] == ["1", "2"]


def _wait_for_rows(config, count: int, timeout: float = 10) -> None:
    import time

    from deltalake.exceptions import TableNotFoundError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(bronze(config)) >= count:
                return
        except TableNotFoundError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"bronze did not reach {count} rows in {timeout} s")


def test_a_slot_dropped_while_streaming_stops_the_ingest_with_exit_3(source):
    """Retrying a dropped slot forever would look healthy: stop with a clear error."""
    from pipelines.errors import SourceError

    dsn = source.source.dsn
    outcome = {}

    def ingest_forever():
        try:
            run_ingest(source, IngestOptions(), StopRequested())
        except SourceError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=ingest_forever)
    worker.start()
    execute(dsn, "INSERT INTO items (id) VALUES (1)")
    _wait_for_rows(source, 1)
    drop_slot(dsn)
    worker.join(30)
    assert not worker.is_alive()
    assert outcome["error"].exit_code == 3
    # The stream's error or the lineage check before the reconnect, whichever comes first
    assert "lakehouse recover" in str(outcome["error"])
