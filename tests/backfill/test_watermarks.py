"""Watermarks bracket every chunk in the WAL, and a chunk's read takes no blocking lock."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter

import psycopg
import pytest

from pipelines.backfill.source_tables import table_shape
from pipelines.backfill.chunk import chunk_statement, copy_out, parse_csv, take_snapshot
from pipelines.bronze.watermarks import KeyRange, Snapshot, Watermark, parse_watermark
from pipelines.bronze.schema import WATERMARK_PREFIX
from pipelines.errors import DataError
from pipelines.ingest.pgoutput import Begin, Commit, LogicalMessage, decode_message
from pipelines.source.text_format import with_text_format
from tests.support.backfill import backfill, setup_source, snapshot_rows, states
from tests.support.config import make_config

pytestmark = pytest.mark.pg_versions

DDL = """
CREATE TABLE items (id int PRIMARY KEY, v text);
INSERT INTO items SELECT i, 'v' || i FROM generate_series(1, 230) i;
"""


@pytest.fixture
def items(source_dsn, lake):
    setup_source(source_dsn, DDL, ["public.items"])
    return make_config(source_dsn, lake, ["public.items"])


def wal_messages(dsn: str) -> list[tuple[int, int, int, LogicalMessage]]:
    """(commit_lsn, index in txn, xid, message) of every logical message in the slot."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('lakehouse', NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'lakehouse', 'messages', 'true')").fetchall()
    out, pending, xid = [], [], 0
    for (data,) in rows:
        message = decode_message(data)
        if isinstance(message, Begin):
            xid, pending = message.xid, []
        elif isinstance(message, LogicalMessage):
            pending.append(message)
        elif isinstance(message, Commit):
            out += [(message.commit_lsn, i, xid, m) for i, m in enumerate(pending)]
    return out


def test_every_chunk_has_a_low_then_a_high_watermark_around_its_select(items):
    backfill(items, chunk_size=40)
    messages = wal_messages(items.source.dsn)
    assert messages and all(m.prefix == WATERMARK_PREFIX and m.flags == 1  # transactional
                            for _, _, _, m in messages)
    marks: dict[tuple[int, str], tuple] = {}
    for commit_lsn, index, xid, message in messages:
        body = json.loads(message.content)
        mark = parse_watermark(message.content)
        expected_keys = {"backfill_id", "chunk_id", "table", "kind"} | (
            {"snapshot", "rows", "keys"} if mark.kind == "high" else set())
        assert set(body) == expected_keys
        assert (mark.chunk_id, mark.kind) not in marks, "a chunk id was used twice"
        marks[(mark.chunk_id, mark.kind)] = ((commit_lsn, index), xid, mark)

    state = states(items)[0]
    assert state.status == "done" and state.rows_done == 230
    chunk_ids = sorted({chunk for chunk, _ in marks})
    assert len(chunk_ids) == state.chunks_done == 6  # 5 full chunks and a short one
    for chunk_id in chunk_ids:
        low_pos, low_xid, low = marks[(chunk_id, "low")]
        high_pos, high_xid, high = marks[(chunk_id, "high")]
        assert low_pos < high_pos
        assert low.table == high.table == "public.items"
        assert low.backfill_id == high.backfill_id == state.backfill_id
        assert low.snapshot is None and isinstance(high.snapshot, Snapshot)
        # low committed before the SELECT's snapshot was taken, high only after it
        assert high.snapshot.sees(low_xid) and not high.snapshot.sees(high_xid)
    # rows in bronze belong exactly to the chunks that have both watermarks, and each
    # high watermark counts its chunk's rows
    rows = Counter(r["chunk_id"] for r in snapshot_rows(items))
    assert set(rows) <= set(chunk_ids)
    assert {c: marks[(c, "high")][2].rows for c in chunk_ids} == {c: rows[c] for c in chunk_ids}
    # each high watermark names the keys its chunk read: after the one before it ended
    ranges = [marks[(c, "high")][2].keys for c in chunk_ids]
    assert ranges[0].after is None
    assert all(later.after == earlier.last for earlier, later in zip(ranges, ranges[1:]))
    for chunk_id, keys in zip(chunk_ids, ranges):
        ids = sorted(int(r["values"][0]) for r in snapshot_rows(items)
                     if r["chunk_id"] == chunk_id)
        assert keys.last == (str(ids[-1]),)
        assert keys.after is None or int(keys.after[0]) < ids[0]


def test_watermark_json_round_trips():
    high = Watermark("b", 7, "public.t", "high", Snapshot(10, 15, (11, 13)), 40,
                     KeyRange(("a", "1"), ("c", "9")))
    assert json.loads(high.to_json()) == {"backfill_id": "b", "chunk_id": 7, "table": "public.t",
                                          "kind": "high",
                                          "snapshot": {"xmin": 10, "xmax": 15, "xip": [11, 13]},
                                          "rows": 40,
                                          "keys": {"after": ["a", "1"], "last": ["c", "9"]}}
    assert parse_watermark(high.to_json()) == high
    first = Watermark("b", 0, "public.t", "high", Snapshot(10, 15), 0, KeyRange(None, None))
    assert parse_watermark(first.to_json()) == first
    low = parse_watermark(Watermark("b", 0, "public.t", "low").to_json())
    assert low.snapshot is None and low.rows is None and low.keys is None


@pytest.mark.parametrize("keys", ['{"after": null}', '{"after": "7", "last": null}',
                                  '{"after": [], "last": null}', '{"after": [7], "last": null}'])
def test_watermark_with_a_bad_key_range_is_a_data_error(keys):
    content = '{"backfill_id": "b", "chunk_id": 1, "table": "public.t", "kind": "high", ' \
              f'"keys": {keys}}}'
    with pytest.raises(DataError, match="malformed backfill watermark"):
        parse_watermark(content)


@pytest.mark.parametrize("rows", ["-1", "1.5", "true", '"7"'])
def test_watermark_with_a_bad_row_count_is_a_data_error(rows):
    content = '{"backfill_id": "b", "chunk_id": 1, "table": "public.t", "kind": "high", ' \
              f'"rows": {rows}}}'
    with pytest.raises(DataError, match="rows must be a whole number"):
        parse_watermark(content)


def test_snapshot_visibility_widens_32_bit_xids():
    snap = Snapshot((5 << 32) + 100, (5 << 32) + 110, ((5 << 32) + 105,))
    assert snap.sees(99) and snap.sees(104) and not snap.sees(105) and not snap.sees(110)
    assert snap.sees((5 << 32) + 99) and not snap.sees((5 << 32) + 120)
    wrapped = Snapshot((1 << 32) - 5, (1 << 32) + 5, ())
    assert wrapped.sees((1 << 32) - 10) and wrapped.sees(2) and not wrapped.sees(6)


def test_writers_do_not_wait_while_a_chunk_transaction_is_open(items):
    """The chunk's SELECT holds only ACCESS SHARE: updates, inserts and deletes go through."""
    dsn = items.source.dsn
    with psycopg.connect(with_text_format(dsn), autocommit=True) as reader:
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        take_snapshot(reader)
        shape = table_shape(reader, "public.items", "lakehouse")
        first = parse_csv(copy_out(reader, chunk_statement(shape, None, 100))[0], 2)
        pid = reader.info.backend_pid
        with psycopg.connect(dsn, autocommit=True) as writer:
            writer.execute("SET lock_timeout = '1s'")
            writer.execute("UPDATE items SET v = 'changed' WHERE id <= 150")
            writer.execute("INSERT INTO items VALUES (1000, 'new')")
            writer.execute("DELETE FROM items WHERE id = 2")
            locks = writer.execute(
                "SELECT DISTINCT mode FROM pg_locks WHERE pid = %s AND locktype = 'relation'",
                (pid,)).fetchall()
        second = parse_csv(copy_out(reader, chunk_statement(shape, ("100",), 100))[0], 2)
        reader.execute("COMMIT")
    assert locks == [("AccessShareLock",)]
    # and the open transaction kept reading its own snapshot
    assert first.column(1)[1].as_py() == "v2"
    assert second.column(1).to_pylist()[:3] == ["v101", "v102", "v103"]


def test_backfill_runs_beside_a_writer_that_never_waits(items):
    stop, errors, updates = threading.Event(), [], [0]

    def write() -> None:
        with psycopg.connect(items.source.dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '1s'")
            try:
                while not stop.is_set():
                    conn.execute("UPDATE items SET v = v || '.' WHERE id = %s",
                                 (updates[0] % 230 + 1,))
                    updates[0] += 1
            except psycopg.Error as exc:
                errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        backfill(items, chunk_size=20)
    finally:
        stop.set()
        thread.join()
    assert not errors and updates[0] > 0


LOCKED_COPY = """
import sys, threading, time, psycopg
from psycopg import sql
from pipelines.backfill.chunk import copy_out
dsn = sys.argv[1]
holder = psycopg.connect(dsn)
holder.execute("TRUNCATE items")  # ACCESS EXCLUSIVE until this thread commits
def commit_later():
    time.sleep(0.5)  # runs only if copy_out gave up the GIL while it waits
    holder.commit()
threading.Thread(target=commit_later).start()
with psycopg.connect(dsn, autocommit=True) as reader:
    print(copy_out(reader, sql.SQL("COPY (SELECT * FROM items) TO STDOUT (FORMAT csv)"))[1])
"""


def test_a_chunk_read_waiting_for_a_lock_lets_other_threads_run(items):
    """A COPY behind another transaction's lock waits without the GIL: the thread that
    commits that transaction must run, or the process deadlocks (seen in the demo, whose
    workload truncates a table while the backfill reads it)."""
    done = subprocess.run([sys.executable, "-c", LOCKED_COPY, items.source.dsn],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"  # read after the TRUNCATE committed
