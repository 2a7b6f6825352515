"""Pure decoder of pgoutput logical replication messages, protocol versions 1 and 2.

Bytes in, one frozen dataclass out, nothing else: no I/O, no catalog look-ups, no state.
The caller (the replication loop, or a test feeding `pg_logical_slot_peek_binary_changes`
rows) tracks the one piece of context the bytes do not carry: whether the message sits
inside a Stream Start/Stop block, where protocol v2 prefixes data messages with the xid.

Format: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
Text values are decoded as UTF-8, so the source database must use the UTF8 encoding.
Anything malformed raises `PgOutputDecodeError`; a message is never returned partially.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Callable, Literal, TypeAlias, Union

from pipelines.errors import DataError

# Postgres timestamps count microseconds from this instant.
PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)

# Big-endian readers named by width. Ids, LSNs and counts are unsigned on the wire;
# timestamps and atttypmod are signed.
_UINT16 = struct.Struct("!H")
_UINT32 = struct.Struct("!I")
_UINT64 = struct.Struct("!Q")
_UINT32_UINT32 = struct.Struct("!II")
_unpack_uint16 = _UINT16.unpack_from
_unpack_uint32 = _UINT32.unpack_from
_unpack_uint32_uint32 = _UINT32_UINT32.unpack_from
# Fixed layouts after the type byte, one per message that has one.
_BEGIN = struct.Struct("!QqI")  # final lsn, commit ts, xid
_COMMIT = struct.Struct("!BQQq")  # flags, commit lsn, end lsn, commit ts
_STREAM_START = struct.Struct("!IB")  # xid, first-segment flag
_STREAM_COMMIT = struct.Struct("!IBQQq")  # xid, flags, commit lsn, end lsn, commit ts
_STREAM_ABORT = struct.Struct("!II")  # xid, subxid (protocol v2 and later)
_STREAM_ABORT_PARALLEL = struct.Struct("!IIQq")  # + abort lsn, ts (v4, streaming=parallel)
_MESSAGE = struct.Struct("!BQ")  # flags, lsn
_TRUNCATE = struct.Struct("!IB")  # relation count, option bits
_COLUMN_TYPE = struct.Struct("!Ii")  # type oid, atttypmod


class PgOutputDecodeError(DataError, ValueError):
    """Bytes that are not a valid pgoutput message; `offset` is where decoding stopped."""

    def __init__(self, problem: str, offset: int) -> None:
        super().__init__(f"{problem} at offset {offset}")
        self.offset = offset


class Marker(enum.Enum):
    """Column values that are not data: kept apart so NULL never stands in for TOAST."""

    NULL = "n"
    UNCHANGED_TOAST = "u"


NULL = Marker.NULL
"""SQL NULL (kind 'n')."""
UNCHANGED_TOAST = Marker.UNCHANGED_TOAST
"""A TOASTed value the change did not touch (kind 'u'): the value is not sent, keep the old one."""

ColumnValue: TypeAlias = Union[str, bytes, Marker]
"""Text format ('t') as str, binary format ('b') as bytes, or NULL / UNCHANGED_TOAST."""
TupleData: TypeAlias = tuple[ColumnValue, ...]
OldTupleKind: TypeAlias = Literal["K", "O"]
"""'K': only the replica identity key columns are set; 'O': the whole old row."""


@dataclass(frozen=True, slots=True)
class Begin:
    """Start of a transaction; `final_lsn` is the LSN of its commit record."""

    final_lsn: int
    commit_ts: datetime
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    """End of a transaction; `end_lsn` is the position to confirm once it is durable."""

    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: datetime


@dataclass(frozen=True, slots=True)
class Origin:
    """The transaction was replayed from another node (replication origin)."""

    origin_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    """One column of a Relation message."""

    flags: int
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        """Part of the replica identity key (flag bit 1)."""
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class Relation:
    """Schema of a table, sent before its first change and again after it changes."""

    relation_id: int
    namespace: str
    name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]
    xid: int | None = None

    @property
    def schema(self) -> str:
        """The namespace, with pgoutput's '' for pg_catalog spelled out."""
        return self.namespace or "pg_catalog"


@dataclass(frozen=True, slots=True)
class Type:
    """A non-built-in data type used by a following Relation."""

    type_oid: int
    namespace: str
    name: str
    xid: int | None = None

    @property
    def schema(self) -> str:
        """The namespace, with pgoutput's '' for pg_catalog spelled out."""
        return self.namespace or "pg_catalog"


@dataclass(frozen=True, slots=True)
class Insert:
    """A new row."""

    relation_id: int
    new: TupleData
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Update:
    """A changed row; `old` is sent only for a key change ('K') or REPLICA IDENTITY FULL ('O')."""

    relation_id: int
    old_kind: OldTupleKind | None
    old: TupleData | None
    new: TupleData
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """A deleted row, identified by its key ('K') or its whole old row ('O')."""

    relation_id: int
    old_kind: OldTupleKind
    old: TupleData
    xid: int | None = None


@dataclass(frozen=True, slots=True)
class Truncate:
    """TRUNCATE of one or more tables in one statement."""

    relation_ids: tuple[int, ...]
    options: int
    xid: int | None = None

    @property
    def cascade(self) -> bool:
        return bool(self.options & 1)

    @property
    def restart_identity(self) -> bool:
        return bool(self.options & 2)


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """A `pg_logical_emit_message` record (backfill watermarks travel this way)."""

    flags: int
    lsn: int
    prefix: str
    content: bytes
    xid: int | None = None

    @property
    def transactional(self) -> bool:
        return bool(self.flags & 1)


@dataclass(frozen=True, slots=True)
class StreamStart:
    """Opens a block of changes of in-progress transaction `xid` (protocol v2)."""

    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    """Closes the current streamed block."""


@dataclass(frozen=True, slots=True)
class StreamCommit:
    """Streamed transaction `xid` committed; same LSNs as a Commit."""

    xid: int
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: datetime


@dataclass(frozen=True, slots=True)
class StreamAbort:
    """Streamed (sub)transaction aborted: drop its changes. `subxid == xid` for the top level.

    Abort LSN and time come only with protocol v4 and streaming=parallel.
    """

    xid: int
    subxid: int
    abort_lsn: int | None = None
    abort_ts: datetime | None = None


PgOutputMessage: TypeAlias = Union[
    Begin,
    Commit,
    Origin,
    Relation,
    Type,
    Insert,
    Update,
    Delete,
    Truncate,
    LogicalMessage,
    StreamStart,
    StreamStop,
    StreamCommit,
    StreamAbort,
]


def timestamp_from_pg(micros: int) -> datetime:
    """Convert Postgres microseconds since 2000-01-01 UTC to an aware datetime (lossless)."""
    try:
        return PG_EPOCH + timedelta(0, 0, micros)  # positional: twice as fast as microseconds=
    except OverflowError:
        raise ValueError(f"Postgres timestamp {micros} is outside datetime's range") from None


def timestamp_to_pg(moment: datetime) -> int:
    """Convert an aware datetime to Postgres microseconds since 2000-01-01 UTC."""
    if moment.tzinfo is None:
        raise ValueError("timestamp must be timezone-aware")
    return (moment - PG_EPOCH) // timedelta(microseconds=1)


def decode_message(data: bytes | bytearray | memoryview, *, in_stream: bool = False) -> PgOutputMessage:
    """Decode one pgoutput message.

    `in_stream` must be True between Stream Start and Stream Stop (protocol v2): there
    Relation, Type, Insert, Update, Delete, Truncate and Message carry the xid of the
    streamed transaction, which is returned in their `xid` field (None otherwise).
    """
    # One copy up front buys bytes.find for C strings and cheap small slices below.
    buf = data if type(data) is bytes else bytes(data)
    if not buf:
        raise PgOutputDecodeError("empty message", 0)
    handler = _HANDLERS.get(buf[0])
    if handler is None:
        raise PgOutputDecodeError(f"unknown message type {chr(buf[0])!r} (0x{buf[0]:02x})", 0)
    return handler(buf, in_stream)


# --- reading primitives: each checks bounds and names what it was reading -------------


def _truncated(what: str, offset: int, need: int, size: int) -> PgOutputDecodeError:
    return PgOutputDecodeError(f"truncated message: {what} needs {need} bytes, {size - offset} left", offset)


def _fixed(layout: struct.Struct, buf: bytes, pos: int, what: str) -> tuple:
    if pos + layout.size > len(buf):
        raise _truncated(what, pos, layout.size, len(buf))
    return layout.unpack_from(buf, pos)


def _exact(layout: struct.Struct, buf: bytes, what: str) -> tuple:
    """Unpack a message that is the type byte plus `layout`, nothing more or less."""
    values = _fixed(layout, buf, 1, what)
    _end(buf, 1 + layout.size, what)
    return values


def _end(buf: bytes, pos: int, what: str) -> None:
    if pos != len(buf):
        raise PgOutputDecodeError(f"{len(buf) - pos} trailing bytes after {what}", pos)


def _text(buf: bytes, pos: int, end: int, what: str) -> str:
    try:
        return buf[pos:end].decode()
    except UnicodeDecodeError as exc:
        raise PgOutputDecodeError(f"{what} is not valid UTF-8 ({exc.reason})", pos + exc.start) from None


def _cstring(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    """Read a NUL-terminated string; return it and the offset after the NUL."""
    end = buf.find(0, pos)
    if end < 0:
        raise PgOutputDecodeError(f"truncated message: {what} has no NUL terminator", pos)
    return _text(buf, pos, end, what), end + 1


def _timestamp(micros: int, pos: int, what: str) -> datetime:
    try:
        return timestamp_from_pg(micros)
    except ValueError as exc:
        raise PgOutputDecodeError(f"{what}: {exc}", pos) from None


def _xid_and_oid(buf: bytes, in_stream: bool, what: str) -> tuple[int | None, int, int]:
    """Read the optional streamed xid and the relation/type oid after the type byte."""
    if in_stream:
        if len(buf) < 9:
            raise _truncated(f"{what} xid and oid", 1, 8, len(buf))
        xid, oid = _unpack_uint32_uint32(buf, 1)
        return xid, oid, 9
    if len(buf) < 5:
        raise _truncated(f"{what} oid", 1, 4, len(buf))
    return None, _unpack_uint32(buf, 1)[0], 5


def _tuple(buf: bytes, pos: int, what: str) -> tuple[TupleData, int]:
    """Read TupleData; return the column values and the offset after them."""
    size = len(buf)
    if pos + 2 > size:
        raise _truncated(f"{what} column count", pos, 2, size)
    (count,) = _unpack_uint16(buf, pos)
    pos += 2
    values: list[ColumnValue] = []
    append = values.append
    for column in range(count):
        if pos >= size:
            raise _truncated(f"{what} column {column} kind", pos, 1, size)
        kind = buf[pos]
        pos += 1
        if kind == 0x74 or kind == 0x62:  # 't' text, 'b' binary: Int32 length + bytes
            if pos + 4 > size:
                raise _truncated(f"{what} column {column} length", pos, 4, size)
            end = pos + 4 + _unpack_uint32(buf, pos)[0]
            pos += 4
            if end > size:
                raise _truncated(f"{what} column {column} value", pos, end - pos, size)
            if kind == 0x74:
                try:  # _text() inlined: this loop is the hot path
                    append(buf[pos:end].decode())
                except UnicodeDecodeError as exc:
                    problem = f"{what} column {column} is not valid UTF-8 ({exc.reason})"
                    raise PgOutputDecodeError(problem, pos + exc.start) from None
            else:
                append(buf[pos:end])
            pos = end
        elif kind == 0x6E:  # 'n'
            append(NULL)
        elif kind == 0x75:  # 'u'
            append(UNCHANGED_TOAST)
        else:
            raise PgOutputDecodeError(f"{what} column {column} has unknown kind {chr(kind)!r}", pos - 1)
    return tuple(values), pos


# --- one handler per message type -------------------------------------------------------


def _begin(buf: bytes, in_stream: bool) -> Begin:
    final_lsn, commit_ts, xid = _exact(_BEGIN, buf, "Begin")
    return Begin(final_lsn, _timestamp(commit_ts, 9, "Begin commit time"), xid)


def _commit(buf: bytes, in_stream: bool) -> Commit:
    flags, commit_lsn, end_lsn, commit_ts = _exact(_COMMIT, buf, "Commit")
    return Commit(flags, commit_lsn, end_lsn, _timestamp(commit_ts, 18, "Commit commit time"))


def _origin(buf: bytes, in_stream: bool) -> Origin:
    (origin_lsn,) = _fixed(_UINT64, buf, 1, "Origin lsn")
    name, pos = _cstring(buf, 9, "Origin name")
    _end(buf, pos, "Origin")
    return Origin(origin_lsn, name)


def _relation(buf: bytes, in_stream: bool) -> Relation:
    xid, relation_id, pos = _xid_and_oid(buf, in_stream, "Relation")
    namespace, pos = _cstring(buf, pos, "Relation namespace")
    name, pos = _cstring(buf, pos, "Relation name")
    if pos + 3 > len(buf):
        raise _truncated("Relation replica identity and column count", pos, 3, len(buf))
    replica_identity = chr(buf[pos])
    (count,) = _unpack_uint16(buf, pos + 1)
    pos += 3
    columns = []
    for column in range(count):
        if pos >= len(buf):
            raise _truncated(f"Relation column {column} flags", pos, 1, len(buf))
        flags = buf[pos]
        column_name, pos = _cstring(buf, pos + 1, f"Relation column {column} name")
        type_oid, type_modifier = _fixed(_COLUMN_TYPE, buf, pos, f"Relation column {column} type")
        pos += _COLUMN_TYPE.size
        columns.append(RelationColumn(flags, column_name, type_oid, type_modifier))
    _end(buf, pos, "Relation")
    return Relation(relation_id, namespace, name, replica_identity, tuple(columns), xid)


def _type(buf: bytes, in_stream: bool) -> Type:
    xid, type_oid, pos = _xid_and_oid(buf, in_stream, "Type")
    namespace, pos = _cstring(buf, pos, "Type namespace")
    name, pos = _cstring(buf, pos, "Type name")
    _end(buf, pos, "Type")
    return Type(type_oid, namespace, name, xid)


def _expect_new(buf: bytes, pos: int, what: str) -> int:
    if pos >= len(buf):
        raise _truncated(f"{what} new tuple marker", pos, 1, len(buf))
    if buf[pos] != 0x4E:  # 'N'
        raise PgOutputDecodeError(f"{what} expected new tuple 'N', got {chr(buf[pos])!r}", pos)
    return pos + 1


def _insert(buf: bytes, in_stream: bool) -> Insert:
    xid, relation_id, pos = _xid_and_oid(buf, in_stream, "Insert")
    new, pos = _tuple(buf, _expect_new(buf, pos, "Insert"), "Insert new tuple")
    _end(buf, pos, "Insert")
    return Insert(relation_id, new, xid)


def _update(buf: bytes, in_stream: bool) -> Update:
    xid, relation_id, pos = _xid_and_oid(buf, in_stream, "Update")
    old_kind: OldTupleKind | None = None
    old = None
    if pos < len(buf) and buf[pos] in b"KO":
        old_kind = "K" if buf[pos] == 0x4B else "O"
        old, pos = _tuple(buf, pos + 1, "Update old tuple")
    new, pos = _tuple(buf, _expect_new(buf, pos, "Update"), "Update new tuple")
    _end(buf, pos, "Update")
    return Update(relation_id, old_kind, old, new, xid)


def _delete(buf: bytes, in_stream: bool) -> Delete:
    xid, relation_id, pos = _xid_and_oid(buf, in_stream, "Delete")
    if pos >= len(buf):
        raise _truncated("Delete old tuple marker", pos, 1, len(buf))
    if buf[pos] not in b"KO":
        raise PgOutputDecodeError(f"Delete expected old tuple 'K' or 'O', got {chr(buf[pos])!r}", pos)
    old_kind: OldTupleKind = "K" if buf[pos] == 0x4B else "O"
    old, pos = _tuple(buf, pos + 1, "Delete old tuple")
    _end(buf, pos, "Delete")
    return Delete(relation_id, old_kind, old, xid)


def _truncate(buf: bytes, in_stream: bool) -> Truncate:
    pos = 1
    xid = None
    if in_stream:
        (xid,) = _fixed(_UINT32, buf, pos, "Truncate xid")
        pos += 4
    count, options = _fixed(_TRUNCATE, buf, pos, "Truncate header")
    pos += _TRUNCATE.size
    ids = struct.Struct(f"!{count}I")
    relation_ids = _fixed(ids, buf, pos, f"Truncate {count} relation ids")
    _end(buf, pos + ids.size, "Truncate")
    return Truncate(relation_ids, options, xid)


def _logical_message(buf: bytes, in_stream: bool) -> LogicalMessage:
    pos = 1
    xid = None
    if in_stream:
        (xid,) = _fixed(_UINT32, buf, pos, "Message xid")
        pos += 4
    flags, lsn = _fixed(_MESSAGE, buf, pos, "Message flags and lsn")
    prefix, pos = _cstring(buf, pos + _MESSAGE.size, "Message prefix")
    (length,) = _fixed(_UINT32, buf, pos, "Message content length")
    pos += 4
    if pos + length > len(buf):
        raise _truncated("Message content", pos, length, len(buf))
    content = buf[pos : pos + length]
    _end(buf, pos + length, "Message")
    return LogicalMessage(flags, lsn, prefix, content, xid)


def _stream_start(buf: bytes, in_stream: bool) -> StreamStart:
    xid, first_segment = _exact(_STREAM_START, buf, "Stream Start")
    return StreamStart(xid, first_segment == 1)


def _stream_stop(buf: bytes, in_stream: bool) -> StreamStop:
    _end(buf, 1, "Stream Stop")
    return StreamStop()


def _stream_commit(buf: bytes, in_stream: bool) -> StreamCommit:
    xid, flags, commit_lsn, end_lsn, commit_ts = _exact(_STREAM_COMMIT, buf, "Stream Commit")
    commit_time = _timestamp(commit_ts, 22, "Stream Commit commit time")
    return StreamCommit(xid, flags, commit_lsn, end_lsn, commit_time)


def _stream_abort(buf: bytes, in_stream: bool) -> StreamAbort:
    if len(buf) > 1 + _STREAM_ABORT.size:
        xid, subxid, abort_lsn, abort_ts = _exact(_STREAM_ABORT_PARALLEL, buf, "Stream Abort (v4)")
        return StreamAbort(xid, subxid, abort_lsn, _timestamp(abort_ts, 17, "Stream Abort abort time"))
    xid, subxid = _exact(_STREAM_ABORT, buf, "Stream Abort")
    return StreamAbort(xid, subxid)


_HANDLERS: dict[int, Callable[[bytes, bool], PgOutputMessage]] = {
    ord("B"): _begin,
    ord("C"): _commit,
    ord("O"): _origin,
    ord("R"): _relation,
    ord("Y"): _type,
    ord("I"): _insert,
    ord("U"): _update,
    ord("D"): _delete,
    ord("T"): _truncate,
    ord("M"): _logical_message,
    ord("S"): _stream_start,
    ord("E"): _stream_stop,
    ord("c"): _stream_commit,
    ord("A"): _stream_abort,
}
