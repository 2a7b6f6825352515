"""pgoutput decoder: bytes built with struct.pack in, frozen dataclasses out."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest

from pipelines.errors import DataError
from pipelines.ingest.pgoutput import (
    NULL,
    PG_EPOCH,
    UNCHANGED_TOAST,
    Begin,
    Commit,
    Delete,
    Insert,
    LogicalMessage,
    Origin,
    PgOutputDecodeError,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    decode_message,
    timestamp_from_pg,
    timestamp_to_pg,
)
from tests.support.pgoutput_bytes import (BIG_LSN, BIG_OID, BIG_XID, TS, TS_US, begin, binary,
                                          commit, cstr, delete, i64, insert, message, relation,
                                          text, truncate, tuple_data, u8, u16, u32, u64,
                                          update, xid_of)


# --- one test per message type ------------------------------------------------------------


def test_begin_keeps_lsn_and_xid_unsigned():
    assert decode_message(begin(BIG_LSN, TS_US, BIG_XID)) == Begin(BIG_LSN, TS, BIG_XID)


def test_commit():
    msg = decode_message(commit(BIG_LSN - 10, BIG_LSN, TS_US))
    assert msg == Commit(flags=0, commit_lsn=BIG_LSN - 10, end_lsn=BIG_LSN, commit_ts=TS)
    assert msg.commit_ts.tzinfo is timezone.utc


def test_empty_transaction_is_begin_then_commit():
    lsn, end = 0x16_B374D848, 0x16_B374D878
    decoded = [decode_message(m) for m in (begin(lsn, TS_US, 742), commit(lsn, end, TS_US))]
    assert decoded == [Begin(lsn, TS, 742), Commit(0, lsn, end, TS)]


def test_origin():
    assert decode_message(b"O" + u64(BIG_LSN) + cstr("node_a")) == Origin(BIG_LSN, "node_a")


@pytest.mark.parametrize("xid", [None, BIG_XID])
def test_relation(xid):
    columns = [(1, "id", 20, -1), (0, "name", 1043, 68), (0, "naïve", BIG_OID, -1)]
    data = relation(BIG_OID, "public", "users", "d", columns, xid=xid)
    assert decode_message(data, in_stream=xid is not None) == Relation(
        relation_id=BIG_OID,
        namespace="public",
        name="users",
        replica_identity="d",
        columns=(
            RelationColumn(1, "id", 20, -1),
            RelationColumn(0, "name", 1043, 68),
            RelationColumn(0, "naïve", BIG_OID, -1),
        ),
        xid=xid,
    )


def test_relation_key_flag_and_pg_catalog_namespace():
    columns = [(1, "oid", 26, -1), (0, "relname", 19, -1)]
    msg = decode_message(relation(1259, "", "pg_class", "n", columns))
    assert msg.namespace == "" and msg.schema == "pg_catalog"
    assert [c.is_key for c in msg.columns] == [True, False]


def test_relation_without_columns():
    assert decode_message(relation(5, "s", "t", "f", [])).columns == ()


@pytest.mark.parametrize("xid", [None, BIG_XID])
def test_type(xid):
    data = b"Y" + xid_of(xid) + u32(BIG_OID) + cstr("public") + cstr("mood")
    assert decode_message(data, in_stream=xid is not None) == Type(BIG_OID, "public", "mood", xid)


def test_type_in_pg_catalog():
    assert decode_message(b"Y" + u32(16) + cstr("") + cstr("bool")).schema == "pg_catalog"


@pytest.mark.parametrize("xid", [None, BIG_XID])
def test_insert(xid):
    data = insert(BIG_OID, tuple_data(text("42"), text("alice")), xid=xid)
    assert decode_message(data, in_stream=xid is not None) == Insert(BIG_OID, ("42", "alice"), xid)


def test_insert_tells_null_from_unchanged_toast_from_empty_string():
    msg = decode_message(insert(1, tuple_data(b"n", b"u", text(""), text("x"))))
    assert msg.new == (NULL, UNCHANGED_TOAST, "", "x")
    assert msg.new[0] is NULL and msg.new[1] is UNCHANGED_TOAST and NULL is not UNCHANGED_TOAST


def test_insert_non_ascii_text_and_binary_values():
    data = insert(1, tuple_data(text("Zoë — 東京 🚀"), binary(b"\x00\xff\x10"), binary(b"")))
    msg = decode_message(data)
    assert msg.new == ("Zoë — 東京 🚀", b"\x00\xff\x10", b"")


def test_insert_with_zero_columns():
    assert decode_message(insert(1, tuple_data())).new == ()


@pytest.mark.parametrize("xid", [None, BIG_XID])
def test_update_without_old_tuple(xid):
    data = update(7, tuple_data(text("1"), b"u"), xid=xid)
    expected = Update(7, None, None, ("1", UNCHANGED_TOAST), xid)
    assert decode_message(data, in_stream=xid is not None) == expected


@pytest.mark.parametrize("xid", [None, BIG_XID])
@pytest.mark.parametrize(
    ("kind", "old", "expected_old"),
    [
        (b"K", tuple_data(text("1"), b"n"), ("1", NULL)),  # key change: non-key columns are null
        (b"O", tuple_data(text("1"), text("old")), ("1", "old")),  # REPLICA IDENTITY FULL
    ],
)
def test_update_with_old_tuple(kind, old, expected_old, xid):
    data = update(7, tuple_data(text("2"), text("new")), old=old, old_kind=kind, xid=xid)
    assert decode_message(data, in_stream=xid is not None) == Update(
        7, kind.decode(), expected_old, ("2", "new"), xid
    )


@pytest.mark.parametrize("xid", [None, BIG_XID])
@pytest.mark.parametrize("kind", [b"K", b"O"])
def test_delete(kind, xid):
    data = delete(7, kind, tuple_data(text("1"), b"n"), xid=xid)
    assert decode_message(data, in_stream=xid is not None) == Delete(7, kind.decode(), ("1", NULL), xid)


def test_truncate_many_relations_with_cascade_and_restart_identity():
    oids = [16385, BIG_OID, 2**32 - 1, *range(20000, 20050)]
    msg = decode_message(truncate(oids, options=3))
    assert msg == Truncate(tuple(oids), 3)
    assert msg.cascade and msg.restart_identity


@pytest.mark.parametrize(
    ("options", "cascade", "restart"), [(0, False, False), (1, True, False), (2, False, True)]
)
def test_truncate_flags(options, cascade, restart):
    msg = decode_message(truncate([1], options))
    assert (msg.cascade, msg.restart_identity) == (cascade, restart)


def test_truncate_in_stream():
    assert decode_message(truncate([1, 2], 0, xid=BIG_XID), in_stream=True) == Truncate((1, 2), 0, BIG_XID)


@pytest.mark.parametrize(("flags", "transactional"), [(1, True), (0, False)])
def test_logical_message_with_binary_content(flags, transactional):
    content = b'{"chunk": 1}\x00\xff'
    msg = decode_message(message(flags, BIG_LSN, "lakehouse.watermark", content))
    assert msg == LogicalMessage(flags, BIG_LSN, "lakehouse.watermark", content)
    assert msg.transactional is transactional


def test_logical_message_in_stream_with_empty_prefix_and_content():
    data = message(1, 5, "", b"", xid=BIG_XID)
    assert decode_message(data, in_stream=True) == LogicalMessage(1, 5, "", b"", BIG_XID)


@pytest.mark.parametrize(("flag", "first"), [(1, True), (0, False)])
def test_stream_start(flag, first):
    assert decode_message(b"S" + u32(BIG_XID) + u8(flag)) == StreamStart(BIG_XID, first)


def test_stream_stop():
    assert decode_message(b"E") == StreamStop()


def test_stream_commit():
    data = b"c" + u32(BIG_XID) + u8(0) + u64(BIG_LSN - 1) + u64(BIG_LSN) + i64(TS_US)
    assert decode_message(data) == StreamCommit(BIG_XID, 0, BIG_LSN - 1, BIG_LSN, TS)


def test_stream_abort_protocol_v2():
    assert decode_message(b"A" + u32(BIG_XID) + u32(BIG_XID + 1)) == StreamAbort(BIG_XID, BIG_XID + 1)


def test_stream_abort_protocol_v4_parallel():
    data = b"A" + u32(BIG_XID) + u32(BIG_XID) + u64(BIG_LSN) + i64(TS_US)
    assert decode_message(data) == StreamAbort(BIG_XID, BIG_XID, BIG_LSN, TS)


def test_control_messages_ignore_in_stream():
    # Origin and the Stream messages never carry the extra xid, even inside a block.
    assert decode_message(b"E", in_stream=True) == StreamStop()
    assert decode_message(b"O" + u64(1) + cstr("n"), in_stream=True) == Origin(1, "n")


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, lambda b: memoryview(b"pad" + b)[3:]])
def test_accepts_any_bytes_like(wrap):
    data = insert(1, tuple_data(text("é"), b"n"))
    assert decode_message(wrap(data)) == Insert(1, ("é", NULL))


def test_messages_are_frozen():
    msg = decode_message(insert(1, tuple_data(text("a"))))
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.relation_id = 2  # type: ignore[misc]


# --- timestamps -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("micros", "moment"),
    [
        (0, PG_EPOCH),
        (TS_US, TS),
        (-1, PG_EPOCH - timedelta(microseconds=1)),  # before 2000 is negative
    ],
)
def test_timestamp_conversion_is_lossless(micros, moment):
    assert timestamp_from_pg(micros) == moment
    assert timestamp_to_pg(moment) == micros


def test_timestamp_to_pg_refuses_naive_datetime():
    with pytest.raises(ValueError, match="timezone-aware"):
        timestamp_to_pg(datetime(2024, 1, 1))


# --- errors -------------------------------------------------------------------------------

VALID = [
    begin(BIG_LSN, TS_US, BIG_XID),
    commit(1, 2, TS_US),
    b"O" + u64(1) + cstr("node"),
    relation(1, "public", "t", "d", [(1, "id", 23, -1), (0, "v", 25, -1)]),
    b"Y" + u32(1) + cstr("public") + cstr("mood"),
    insert(1, tuple_data(text("1"), binary(b"\x01"), b"n", b"u")),
    update(1, tuple_data(text("2")), old=tuple_data(text("1")), old_kind=b"K"),
    update(1, tuple_data(text("2"))),
    delete(1, b"O", tuple_data(text("1"))),
    truncate([1, 2, 3], 3),
    message(1, 9, "p", b"body"),
    b"S" + u32(1) + u8(1),
    b"c" + u32(1) + u8(0) + u64(1) + u64(2) + i64(TS_US),
    b"A" + u32(1) + u32(1),  # its 9..24-byte extensions are checked separately
]


@pytest.mark.parametrize("data", VALID, ids=lambda d: chr(d[0]))
def test_every_truncation_raises(data):
    for cut in range(len(data)):
        with pytest.raises(PgOutputDecodeError):
            decode_message(data[:cut])


@pytest.mark.parametrize("data", VALID + [b"E"], ids=lambda d: chr(d[0]))
def test_trailing_garbage_raises(data):
    with pytest.raises(PgOutputDecodeError, match="trailing bytes|truncated"):
        decode_message(data + b"\x00")


def stream_abort_v4_cut() -> bytes:
    return b"A" + u32(1) + u32(1) + u64(1)  # between the v2 and v4 lengths


def update_with_bad_new_marker() -> bytes:
    return b"U" + u32(1) + b"K" + tuple_data() + b"Q" + tuple_data()


@pytest.mark.parametrize(
    ("data", "problem", "offset"),
    [
        (b"", "empty message", 0),
        (b"Z\x00", "unknown message type 'Z'", 0),
        (b"E\x00\x00", "2 trailing bytes after Stream Stop", 1),
        (begin(1, TS_US, 1)[:-1], "Begin needs 20 bytes, 19 left", 1),
        (begin(1, 2**63 - 1, 1), "Begin commit time: Postgres timestamp 9223372036854775807", 9),
        (stream_abort_v4_cut(), "Stream Abort (v4) needs 24 bytes, 16 left", 1),
        (insert(1, tuple_data(b"x")), "Insert new tuple column 0 has unknown kind 'x'", 8),
        (
            insert(1, tuple_data(text("a"), b"t" + u32(100) + b"abc")),
            "Insert new tuple column 1 value needs 100 bytes, 3 left",
            19,
        ),
        (insert(1, u16(2) + text("a")), "Insert new tuple column 1 kind needs 1 bytes, 0 left", 14),
        (insert(1, tuple_data(b"t" + u32(2) + b"\xc3\x28")), "column 0 is not valid UTF-8", 13),
        (b"I" + u32(1) + b"X" + tuple_data(), "Insert expected new tuple 'N', got 'X'", 5),
        (update_with_bad_new_marker(), "Update expected new tuple 'N', got 'Q'", 8),
        (delete(1, b"N", tuple_data()), "Delete expected old tuple 'K' or 'O', got 'N'", 5),
        (b"R" + u32(1) + b"public", "Relation namespace has no NUL terminator", 5),
        (b"R" + u32(1) + cstr("public") + b"\xff\x00d" + u16(0), "Relation name is not valid UTF-8", 12),
        (truncate([1, 2], 0)[:-4], "Truncate 2 relation ids needs 8 bytes, 4 left", 6),
        (message(0, 1, "p", b"abc")[:-1], "Message content needs 3 bytes, 2 left", 16),
        # A streamed insert decoded as if outside a stream: the xid reads as the oid and
        # the first oid byte is not 'N'; caught, not misread.
        (insert(1, tuple_data(), xid=7), "Insert expected new tuple 'N', got '\\x00'", 5),
    ],
)
def test_decode_errors_say_what_and_where(data, problem, offset):
    with pytest.raises(PgOutputDecodeError) as excinfo:
        decode_message(data)
    assert problem in str(excinfo.value)
    assert str(excinfo.value).endswith(f"at offset {offset}")
    assert excinfo.value.offset == offset


def test_streamed_message_too_short_for_its_xid():
    with pytest.raises(PgOutputDecodeError, match="Insert xid and oid needs 8 bytes, 4 left at offset 1"):
        decode_message(b"I" + u32(1), in_stream=True)


def test_decode_error_is_a_value_error_and_a_data_error():
    assert issubclass(PgOutputDecodeError, ValueError)
    assert issubclass(PgOutputDecodeError, DataError)  # the CLI maps it to exit code 4
