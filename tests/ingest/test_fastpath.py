"""The fast path must agree with the reference decoder on the same bytes, or decline.

Reference: decode_message + records_of. Fast: decode_row_change. For every message the
fast path returns either None (the ingest then uses the reference) or exactly the
reference's record; whenever the reference rejects the bytes, the fast path declines.
"""

from __future__ import annotations

import random

import psycopg
import pytest

from datetime import datetime, timezone

from pipelines.errors import DataError
from pipelines.ingest.fastpath import (ROW_MESSAGE_TYPES, decode_begin, decode_commit,
                                       decode_row_change)
from pipelines.ingest.pgoutput import (Begin, Commit, StreamStart, StreamStop, decode_message,
                                       timestamp_to_pg)
from pipelines.ingest.relations import RelationCache
from pipelines.ingest.transactions import records_of, unix_micros
from tests.support.pgoutput_bytes import (
    BIG_LSN, BIG_OID, BIG_XID, TS_US, begin, binary, commit, delete, insert, relation,
    tuple_data, text, update)

OID = 16385
FRAME_HEADER = b"w" + bytes(24)  # XLogData: the ingest passes whole frames, message at 25


def relations(*columns: str, oid: int = OID) -> RelationCache:
    cache = RelationCache()
    cache.add_relation(decode_message(relation(
        oid, "public", "t", "d", [(1 if i == 0 else 0, name, 25, -1)
                                  for i, name in enumerate(columns)])))
    return cache


def reference(data: bytes, cache: RelationCache, in_stream: bool = False):
    """(xid, record) the reference way; raises what the reference raises."""
    message = decode_message(data, in_stream=in_stream)
    [record] = records_of(message, cache)
    return message.xid, record


def fast(data: bytes, cache: RelationCache, in_stream: bool = False):
    """The fast path on a whole XLogData frame, as the ingest calls it."""
    return decode_row_change(FRAME_HEADER + data, len(FRAME_HEADER), in_stream, cache.by_id)


def normalized(decoded):
    """Lists as tuples: the reference may return either for values, bronze stores both alike."""
    def plain(value):
        return tuple(value) if isinstance(value, (list, tuple)) else value
    xid, record = decoded
    return xid, tuple(plain(field) for field in record)


def assert_same(data: bytes, cache: RelationCache, in_stream: bool = False) -> None:
    got = fast(data, cache, in_stream)
    assert got is not None, "the fast path declined a valid message"
    assert normalized(got) == normalized(reference(data, cache, in_stream))
    assert got[1][1] is cache.get(OID)  # the same TableInfo object, not a copy


NULL, TOAST = b"n", b"u"

AGREE = {
    "insert text": insert(OID, tuple_data(text("1"), text("alice"), text("x"))),
    "insert NULL": insert(OID, tuple_data(text("1"), NULL, NULL)),
    "insert empty strings": insert(OID, tuple_data(text(""), text(""), text(""))),
    "insert non-ASCII": insert(OID, tuple_data(text("Zoë — 東京 🚀"), text("naïve"), text("ß"))),
    "insert long value": insert(OID, tuple_data(text("x" * 70_000), NULL, text("y" * 200))),
    "update unchanged TOAST": update(OID, tuple_data(text("1"), TOAST, text("v"))),
    "update all TOAST": update(OID, tuple_data(TOAST, TOAST, TOAST)),
    "update NULL then TOAST": update(OID, tuple_data(text("1"), NULL, TOAST)),
    "update key change": update(OID, tuple_data(text("2"), text("b"), text("c")),
                                old=tuple_data(text("1"), NULL, NULL), old_kind=b"K"),
    "update replica identity full": update(OID, tuple_data(text("1"), text("new"), TOAST),
                                           old=tuple_data(text("1"), text("old"), NULL),
                                           old_kind=b"O"),
    "update old tuple with TOAST": update(OID, tuple_data(text("1"), text("b"), text("c")),
                                          old=tuple_data(text("1"), TOAST, NULL),
                                          old_kind=b"O"),
    "delete by key": delete(OID, b"K", tuple_data(text("1"), NULL, NULL)),
    "delete full row": delete(OID, b"O", tuple_data(text("1"), text("é"), text(""))),
}


@pytest.mark.parametrize("data", AGREE.values(), ids=AGREE.keys())
def test_fast_path_equals_reference(data):
    assert_same(data, relations("id", "name", "body"))


@pytest.mark.parametrize("data", AGREE.values(), ids=AGREE.keys())
def test_fast_path_equals_reference_in_a_stream(data):
    streamed = data[:1] + BIG_XID.to_bytes(4, "big") + data[1:]  # v2: xid after the type
    cache = relations("id", "name", "body")
    assert_same(streamed, cache, in_stream=True)
    assert fast(streamed, cache, in_stream=True)[0] == BIG_XID


def test_relation_id_above_2_31_and_zero_columns():
    cache = relations(oid=BIG_OID)
    data = insert(BIG_OID, tuple_data())
    assert normalized(fast(data, cache)) == normalized(reference(data, cache))


def test_values_are_tuples_for_the_garbage_collector():
    _, record = fast(AGREE["insert NULL"], relations("id", "name", "body"))
    assert type(record[2]) is tuple


DECLINED = {  # valid for the reference decoder only, or invalid for both
    "binary value": insert(OID, tuple_data(text("1"), binary(b"\x00"), NULL)),
    "unknown relation": insert(OID + 1, tuple_data(text("1"), NULL, NULL)),
    "fewer columns than the relation": insert(OID, tuple_data(text("1"), NULL)),
    "more columns than the relation": insert(OID, tuple_data(text("1"), NULL, NULL, NULL)),
    "unknown column kind": insert(OID, tuple_data(text("1"), b"x", NULL)),
    "invalid UTF-8": insert(OID, tuple_data(b"t\x00\x00\x00\x02\xc3\x28", NULL, NULL)),
    "value past the end": insert(OID, tuple_data(text("1"), NULL, b"t\x00\x00\x00\x09abc")),
    "trailing byte": insert(OID, tuple_data(text("1"), NULL, NULL)) + b"\x00",
    "insert with an old tuple": b"I" + OID.to_bytes(4, "big") + b"K"
    + tuple_data(text("1"), NULL, NULL),
    "delete without an old tuple": b"D" + OID.to_bytes(4, "big") + b"N"
    + tuple_data(text("1"), NULL, NULL),
    "update with a bad new marker": update(OID, tuple_data(text("1"), NULL, NULL))
    .replace(b"N\x00\x03", b"Q\x00\x03"),
    "delete then a new tuple": delete(OID, b"K", tuple_data(text("1"), NULL, NULL))
    + b"N" + tuple_data(text("1"), NULL, NULL),
}


@pytest.mark.parametrize("data", DECLINED.values(), ids=DECLINED.keys())
def test_fast_path_declines_what_the_reference_rejects(data):
    cache = relations("id", "name", "body")
    assert fast(data, cache) is None
    with pytest.raises(DataError):  # PgOutputDecodeError is a DataError too
        reference(data, cache)


@pytest.mark.parametrize("data", AGREE.values(), ids=AGREE.keys())
def test_every_truncation_is_declined(data):
    cache = relations("id", "name", "body")
    for cut in range(len(data)):
        assert fast(data[:cut], cache) is None, f"accepted a message cut at {cut}"


def test_random_corruptions_are_declined_or_decoded_exactly_like_the_reference():
    rng = random.Random(7)
    cache = relations("id", "name", "body")
    valid = list(AGREE.values())
    accepted = 0
    for _ in range(20_000):
        data = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 3)):
            position = rng.randrange(len(data))
            action = rng.random()
            if action < 0.6:
                data[position] = rng.randrange(256)
            elif action < 0.8:
                del data[position]
            else:
                data.insert(position, rng.randrange(256))
        data = bytes(data)
        got = fast(data, cache)
        if got is None:
            continue
        accepted += 1
        assert normalized(got) == normalized(reference(data, cache)), data.hex()
    assert accepted > 200  # some corruptions stay valid (a changed text byte, say)


def test_only_row_messages_are_routed_to_the_fast_path():
    assert ROW_MESSAGE_TYPES == {ord("I"), ord("U"), ord("D")}


# --- Begin and Commit ---------------------------------------------------------------------

FIRST_US = timestamp_to_pg(datetime.min.replace(tzinfo=timezone.utc))  # datetime's range
LAST_US = timestamp_to_pg(datetime.max.replace(tzinfo=timezone.utc))


def fast_begin(data: bytes):
    return decode_begin(FRAME_HEADER + data, len(FRAME_HEADER))


def fast_commit(data: bytes):
    return decode_commit(FRAME_HEADER + data, len(FRAME_HEADER))


def reference_begin(message: Begin):
    return message.final_lsn, message.xid, unix_micros(message.commit_ts)


def reference_commit(message: Commit):
    return message.commit_lsn, message.end_lsn


@pytest.mark.parametrize("ts_us", [TS_US, 0, -1, FIRST_US, LAST_US])
def test_begin_and_commit_equal_the_reference(ts_us):
    for data in (begin(BIG_LSN, ts_us, BIG_XID), begin(0, ts_us, 0)):
        assert fast_begin(data) == reference_begin(decode_message(data))
    for data in (commit(BIG_LSN - 9, BIG_LSN, ts_us), commit(1, 2, ts_us, flags=1)):
        assert fast_commit(data) == reference_commit(decode_message(data))


@pytest.mark.parametrize("data", [
    begin(1, FIRST_US - 1, 1), begin(1, LAST_US + 1, 1), begin(1, 2**63 - 1, 1),
    commit(1, 2, FIRST_US - 1), commit(1, 2, -2**63), begin(1, 0, 1) + b"\x00",
    commit(1, 2, 0) + b"\x00"], ids=["begin before year 1", "begin after 9999",
                                      "begin max", "commit before year 1", "commit min",
                                      "begin trailing byte", "commit trailing byte"])
def test_begin_and_commit_the_reference_rejects_are_declined(data):
    assert (fast_begin(data) if data[:1] == b"B" else fast_commit(data)) is None
    with pytest.raises(DataError):
        decode_message(data)


def test_cut_begin_and_commit_are_declined():
    for data in (begin(1, TS_US, 1), commit(1, 2, TS_US)):
        for cut in range(len(data)):
            assert fast_begin(data[:cut]) is None and fast_commit(data[:cut]) is None


# --- bytes captured from the live server -------------------------------------------------


@pytest.fixture
def captured_changes(source_dsn):
    """Every pgoutput message of a varied workload, decoded by pg_logical_slot_get_..."""
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, name text, body text, n numeric, "
                     "at timestamptz, raw bytea, tags text[])")
        conn.execute("ALTER TABLE t ALTER COLUMN body SET STORAGE EXTERNAL")
        conn.execute("CREATE TABLE full_row (id int PRIMARY KEY, v text)")
        conn.execute("ALTER TABLE full_row REPLICA IDENTITY FULL")
        conn.execute("CREATE PUBLICATION pub FOR TABLE t, full_row")
        conn.execute("SELECT pg_create_logical_replication_slot('fast', 'pgoutput')")
    big = "x" * 10_000
    with psycopg.connect(source_dsn) as conn:
        conn.execute(f"INSERT INTO t VALUES (1, 'Zoë 東京', '{big}', 1.5, now(), '\\x00ff', "
                     "'{a,NULL,\"\"}'), (2, NULL, '', NULL, NULL, NULL, '{}'), "
                     "(3, '', NULL, -0.0, '2026-01-01 00:00+05', '\\x', NULL)")
        conn.execute("INSERT INTO full_row VALUES (1, 'old')")
    with psycopg.connect(source_dsn) as conn:
        conn.execute("UPDATE t SET name = 'ü' WHERE id = 1")  # body unchanged: TOAST
        conn.execute("UPDATE t SET id = 4 WHERE id = 2")  # key change: K tuple
        conn.execute("UPDATE full_row SET v = 'new'")  # O tuple
        conn.execute("DELETE FROM t WHERE id = 3")
        conn.execute("DELETE FROM full_row")
    with psycopg.connect(source_dsn) as conn:  # streamed past 64kB, with a rolled-back part
        conn.execute("INSERT INTO t (id, name) SELECT g, 'row ' || g "
                     "FROM generate_series(100, 2100) g")
        conn.execute("SAVEPOINT s")
        conn.execute("UPDATE t SET name = NULL WHERE id < 200")
        conn.execute("ROLLBACK TO SAVEPOINT s")
    with psycopg.connect(source_dsn) as conn:
        conn.execute("SET logical_decoding_work_mem = '64kB'")
        return [bytes(row[0]) for row in conn.execute(
            "SELECT data FROM pg_logical_slot_get_binary_changes('fast', NULL, NULL, "
            "'proto_version', '2', 'streaming', 'on', 'publication_names', 'pub')")]


@pytest.mark.postgres
@pytest.mark.pg_versions
def test_fast_path_equals_reference_on_captured_bytes(captured_changes):
    cache = RelationCache()
    in_stream, checked, streamed, transactions = False, 0, 0, 0
    for data in captured_changes:
        if data[:1] == b"B":
            assert fast_begin(data) == reference_begin(decode_message(data))
        elif data[:1] == b"C":
            assert fast_commit(data) == reference_commit(decode_message(data))
            transactions += 1
        if data[0] in ROW_MESSAGE_TYPES:
            got = fast(data, cache, in_stream)
            assert got is not None, data.hex()
            assert normalized(got) == normalized(reference(data, cache, in_stream))
            checked += 1
            streamed += in_stream
            continue
        message = decode_message(data, in_stream=in_stream)
        if isinstance(message, StreamStart):
            in_stream = True
        elif isinstance(message, StreamStop):
            in_stream = False
        elif type(message).__name__ == "Relation":
            cache.add_relation(message)
        elif type(message).__name__ == "Type":
            cache.add_type(message)
    assert checked > 2000 and streamed > 1000  # plain and streamed messages both seen
    assert transactions >= 2
