"""The decoder on bytes captured from the live server, for every message type."""

from __future__ import annotations

import psycopg
import pytest

from pipelines.ingest.pgoutput import (
    NULL, UNCHANGED_TOAST, Begin, Commit, Delete, Insert, LogicalMessage, Relation,
    StreamAbort, StreamCommit, StreamStart, StreamStop, Truncate, Type,
    decode_message)

pytestmark = [pytest.mark.postgres, pytest.mark.pg_versions]


def captured(dsn: str, *options: str) -> list[bytes]:
    with psycopg.connect(dsn) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")  # stream big transactions
        return [bytes(r[0]) for r in conn.execute(
            "SELECT data FROM pg_logical_slot_get_binary_changes('capture', NULL, NULL, "
            "'publication_names', 'pub', 'messages', 'true', " +
            ", ".join(["%s"] * len(options)) + ")", options)]


@pytest.fixture
def capture_db(source_dsn):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE color AS ENUM ('red', 'blue')")
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, c color, body text)")
        conn.execute("ALTER TABLE a ALTER COLUMN body SET STORAGE EXTERNAL")
        conn.execute("CREATE TABLE b (id int PRIMARY KEY)")
        conn.execute("CREATE TABLE full_row (id int PRIMARY KEY, v text)")
        conn.execute("ALTER TABLE full_row REPLICA IDENTITY FULL")
        conn.execute("CREATE PUBLICATION pub FOR TABLE a, b, full_row")
        conn.execute("SELECT pg_create_logical_replication_slot('capture', 'pgoutput')")
    return source_dsn


def test_every_plain_message_type_from_the_server(capture_db):
    big = "t" * 5000
    with psycopg.connect(capture_db) as conn:
        conn.execute(f"INSERT INTO a VALUES (1, 'red', '{big}'), (2, NULL, 'x')")
        conn.execute("INSERT INTO full_row VALUES (1, 'old')")
        conn.execute("SELECT pg_logical_emit_message(true, 'p', 'tx')")
    with psycopg.connect(capture_db) as conn:
        conn.execute("UPDATE a SET c = 'blue' WHERE id = 1")  # body unchanged (TOAST)
        conn.execute("UPDATE a SET id = 3 WHERE id = 2")  # key change: K tuple
        conn.execute("UPDATE full_row SET v = 'new'")  # replica identity full: O tuple
        conn.execute("DELETE FROM a WHERE id = 3")
        conn.execute("DELETE FROM full_row")
    with psycopg.connect(capture_db) as conn:
        conn.execute("TRUNCATE a, b RESTART IDENTITY")
    with psycopg.connect(capture_db) as conn:
        conn.execute("SELECT pg_logical_emit_message(false, 'p', 'now')")
        conn.execute("SELECT txid_current()")  # an xid, so the commit flushes the WAL
    messages = [decode_message(m) for m in captured(capture_db, "proto_version", "1")]
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["Begin", "Type", "Relation", "Insert", "Insert", "Relation", "Insert",
                     "LogicalMessage", "Commit",
                     "Begin", "Update", "Update", "Update", "Delete", "Delete", "Commit",
                     "Begin", "Type", "Relation", "Relation", "Truncate", "Commit",
                     "LogicalMessage"]
    begin, type_, rel_a = messages[0], messages[1], messages[2]
    assert isinstance(begin, Begin) and begin.xid > 0
    assert isinstance(type_, Type) and type_.name == "color" and type_.schema == "public"
    assert isinstance(rel_a, Relation) and [c.name for c in rel_a.columns] == ["id", "c", "body"]
    assert [c.is_key for c in rel_a.columns] == [True, False, False]
    assert rel_a.columns[1].type_oid == type_.type_oid
    assert messages[3] == Insert(rel_a.relation_id, ("1", "red", big))
    assert messages[4].new == ("2", NULL, "x")
    commit = messages[8]
    assert isinstance(commit, Commit) and commit.commit_lsn == begin.final_lsn
    assert commit.end_lsn > commit.commit_lsn
    toast_update, key_update, full_update = messages[10], messages[11], messages[12]
    assert toast_update.new == ("1", "blue", UNCHANGED_TOAST) and toast_update.old is None
    assert key_update.old_kind == "K" and key_update.old == ("2", NULL, NULL)
    assert full_update.old_kind == "O" and full_update.old == ("1", "old")
    assert isinstance(messages[13], Delete) and messages[13].old_kind == "K"
    assert messages[14].old_kind == "O" and messages[14].old == ("1", "new")
    truncate = messages[20]
    assert isinstance(truncate, Truncate) and len(truncate.relation_ids) == 2
    assert truncate.restart_identity and not truncate.cascade
    tx_message, plain_message = messages[7], messages[22]
    assert isinstance(tx_message, LogicalMessage) and tx_message.transactional
    assert tx_message.prefix == "p" and tx_message.content == b"tx"
    assert not plain_message.transactional and plain_message.content == b"now"


def test_streamed_transaction_messages_from_the_server(capture_db, pg_server):
    with psycopg.connect(capture_db) as conn:
        conn.execute("INSERT INTO b SELECT g FROM generate_series(1, 3000) g")
        conn.execute("SAVEPOINT s")
        conn.execute("INSERT INTO b SELECT g FROM generate_series(5001, 8000) g")
        conn.execute("ROLLBACK TO SAVEPOINT s")
    raw = captured(capture_db, "proto_version", "2", "streaming", "on")
    in_stream, messages = False, []
    for data in raw:
        message = decode_message(data, in_stream=in_stream)
        in_stream = isinstance(message, StreamStart) or (in_stream and not isinstance(
            message, StreamStop))
        messages.append(message)
    kinds = {type(m) for m in messages}
    assert {StreamStart, StreamStop, StreamCommit, Insert} <= kinds
    starts = [m for m in messages if isinstance(m, StreamStart)]
    assert starts[0].first_segment and all(not s.first_segment for s in starts[1:])
    inserts = [m for m in messages if isinstance(m, Insert)]
    assert all(m.xid is not None for m in inserts)  # v2 in-stream messages carry the xid
    aborts = [m for m in messages if isinstance(m, StreamAbort)]
    assert aborts and aborts[0].subxid != aborts[0].xid  # the savepoint's rollback
    commit = messages[-1]
    assert isinstance(commit, StreamCommit) and commit.xid == starts[0].xid
