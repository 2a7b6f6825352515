"""Fast path for the messages that dominate a change stream: Insert, Update, Delete,
and the Begin and Commit around them.

The reference decoder (pgoutput.py) builds a frozen dataclass per message and the
assembler then maps its tuple data to bronze values: two passes and several objects per
change, which made decoding the largest cost of the ingest. This module reads the same
bytes in one pass straight into a bronze record: text values with None for SQL NULL and
for unchanged TOAST, and the names of the unchanged TOAST columns.

It takes only the common, well-formed case and returns None for anything else: binary
values, an unknown relation, a column count that disagrees with the Relation message,
truncated or trailing bytes, invalid UTF-8. The caller then decodes that message with the
reference decoder, which returns it or raises the precise error, so corrupt input is
reported exactly as before. Both paths are tested to agree on the same bytes
(tests/ingest/test_fastpath.py).

The tuple walk repeats the reference decoder's on purpose: the reference returns
markers (NULL, UNCHANGED_TOAST) and checks bounds per value for its error messages; here
one loop maps kinds to bronze values and leaves the bounds to a single end check. Begin
and Commit skip the reference's datetime (the ingest needs microseconds) and its
dataclass: for single-change transactions they were most of the work.
"""

from __future__ import annotations

import struct
from typing import Mapping, Sequence

from datetime import datetime, timezone

from pipelines.bronze.schema import OP_DELETE, OP_INSERT, OP_UPDATE
from pipelines.ingest import pgoutput
from pipelines.ingest.records import Record, change_record
from pipelines.ingest.relations import TableInfo

_unpack_uint16 = struct.Struct("!H").unpack_from
_unpack_uint32 = struct.Struct("!I").unpack_from
_unpack_2uint32 = struct.Struct("!II").unpack_from  # a streamed change's xid and relation

# First bytes of the messages this path takes (everything else uses the reference decoder).
ROW_MESSAGE_TYPES = frozenset(b"IUD")
BEGIN, COMMIT = ord("B"), ord("C")

_PG_TO_UNIX_MICROS = 946_684_800_000_000  # 2000-01-01 minus 1970-01-01
# Timestamps the reference decoder accepts: those a datetime can hold.
_MIN_PG_MICROS = pgoutput.timestamp_to_pg(datetime.min.replace(tzinfo=timezone.utc))
_MAX_PG_MICROS = pgoutput.timestamp_to_pg(datetime.max.replace(tzinfo=timezone.utc))

class _NotFast(Exception):
    """Input this path does not take; the reference decoder will handle it."""


def decode_row_change(buf: bytes, pos: int, in_stream: bool,
                      tables: Mapping[int, TableInfo]) -> tuple[int | None, Record] | None:
    """Decode the Insert/Update/Delete at buf[pos:] (to the end of buf) into a record.

    Returns (xid, record), the record as decode_message plus `transactions.records_of`
    make it, or None if the message needs the reference decoder. `in_stream`: inside Stream Start/Stop, where the message starts with an xid
    (returned; None outside a stream).
    """
    try:
        kind = buf[pos]
        if kind not in ROW_MESSAGE_TYPES:
            return None
        if in_stream:
            xid, relation_id = _unpack_2uint32(buf, pos + 1)
            pos += 4
        else:
            xid, (relation_id,) = None, _unpack_uint32(buf, pos + 1)
        table = tables.get(relation_id)
        if table is None:
            return None
        columns = table.columns
        pos += 5
        marker = buf[pos]
        old_kind = old = None
        if marker == 0x4B or marker == 0x4F:  # 'K' old key, 'O' old row (Update, Delete)
            if kind == 0x49:
                return None
            old_kind = "K" if marker == 0x4B else "O"
            old, _, pos = _text_tuple(buf, pos + 1, columns)
            if kind == 0x44:  # Delete: no new tuple follows
                if pos != len(buf):
                    return None
                return xid, change_record(OP_DELETE, table, (None,) * len(columns), (),
                                          old_kind, old)
            marker = buf[pos]
        if marker != 0x4E or kind == 0x44:  # 'N' new tuple; a Delete must have sent K or O
            return None
        values, unchanged, pos = _text_tuple(buf, pos + 1, columns)
    except (_NotFast, IndexError, struct.error, UnicodeDecodeError):
        return None
    if pos != len(buf):  # also catches a value length running past the end
        return None
    op = OP_INSERT if kind == 0x49 else OP_UPDATE
    return xid, change_record(op, table, values, unchanged, old_kind, old)


def _text_tuple(buf: bytes, pos: int, columns: Sequence[str]) -> tuple[tuple, tuple, int]:
    """TupleData as (values, unchanged TOAST column names, offset after it).

    Values come back as a tuple: a tuple of str and None is untracked by the garbage
    collector once it survives a collection, a list never is, and tens of thousands of
    buffered rows made the collector's full passes a quarter of the decoding time.
    """
    (count,) = _unpack_uint16(buf, pos)
    if count != len(columns):
        raise _NotFast
    pos += 2
    values: list[str | None] = []
    append = values.append
    unchanged: tuple[str, ...] = ()
    for column in range(count):
        kind = buf[pos]
        if kind == 0x74:  # 't': Int32 length + text; a short slice is caught by the end check
            start = pos + 5
            pos = start + _unpack_uint32(buf, pos + 1)[0]
            append(buf[start:pos].decode())
        elif kind == 0x6E:  # 'n' NULL
            append(None)
            pos += 1
        elif kind == 0x75:  # 'u' unchanged TOAST: rare, so a tuple concat is fine
            append(None)
            unchanged += (columns[column],)
            pos += 1
        else:  # 'b' binary (the ingest asks for text) or an unknown kind
            raise _NotFast
    return tuple(values), unchanged, pos


def decode_begin(buf: bytes, pos: int) -> tuple[int, int, int] | None:
    """The Begin at buf[pos:] as (final_lsn, xid, commit time in Unix microseconds)."""
    layout = pgoutput._BEGIN  # the reference decoder's layout: final lsn, commit ts, xid
    if len(buf) - pos != 1 + layout.size or buf[pos] != BEGIN:
        return None
    final_lsn, commit_ts, xid = layout.unpack_from(buf, pos + 1)
    if not _MIN_PG_MICROS <= commit_ts <= _MAX_PG_MICROS:
        return None
    return final_lsn, xid, commit_ts + _PG_TO_UNIX_MICROS


def decode_commit(buf: bytes, pos: int) -> tuple[int, int] | None:
    """The Commit at buf[pos:] as (commit_lsn, end_lsn)."""
    layout = pgoutput._COMMIT  # flags, commit lsn, end lsn, commit ts
    if len(buf) - pos != 1 + layout.size or buf[pos] != COMMIT:
        return None
    _, commit_lsn, end_lsn, commit_ts = layout.unpack_from(buf, pos + 1)
    if not _MIN_PG_MICROS <= commit_ts <= _MAX_PG_MICROS:
        return None
    return commit_lsn, end_lsn
