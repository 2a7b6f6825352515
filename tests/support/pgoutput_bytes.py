"""pgoutput messages as bytes, built with struct.pack the way the server sends them."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

BIG_LSN = 2**64 - 2  # above 2**63: must come back unsigned
BIG_XID = 2**32 - 5  # above 2**31
BIG_OID = 2**31 + 7
TS_US = 757_382_400_123_456  # 2024-01-01 00:00:00.123456 UTC
TS = datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc)


def u8(v: int) -> bytes:
    return struct.pack("!B", v)


def u16(v: int) -> bytes:
    return struct.pack("!H", v)


def u32(v: int) -> bytes:
    return struct.pack("!I", v)


def i32(v: int) -> bytes:
    return struct.pack("!i", v)


def u64(v: int) -> bytes:
    return struct.pack("!Q", v)


def i64(v: int) -> bytes:
    return struct.pack("!q", v)


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def xid_of(xid: int | None) -> bytes:
    """Protocol v2 streamed messages carry the xid after the type byte."""
    return b"" if xid is None else u32(xid)


def text(s: str) -> bytes:
    data = s.encode()
    return b"t" + u32(len(data)) + data


def binary(data: bytes) -> bytes:
    return b"b" + u32(len(data)) + data


def tuple_data(*columns: bytes) -> bytes:
    return u16(len(columns)) + b"".join(columns)


def begin(final_lsn: int, ts_us: int, xid: int) -> bytes:
    return b"B" + u64(final_lsn) + i64(ts_us) + u32(xid)


def commit(commit_lsn: int, end_lsn: int, ts_us: int, flags: int = 0) -> bytes:
    return b"C" + u8(flags) + u64(commit_lsn) + u64(end_lsn) + i64(ts_us)


def relation(oid: int, namespace: str, name: str, identity: str, columns, xid=None) -> bytes:
    """`columns`: (flags, name, type oid, atttypmod) per column."""
    head = b"R" + xid_of(xid) + u32(oid) + cstr(namespace) + cstr(name) + identity.encode()
    body = b"".join(u8(flags) + cstr(col) + u32(oid) + i32(mod) for flags, col, oid, mod in columns)
    return head + u16(len(columns)) + body


def insert(oid: int, new: bytes, xid=None) -> bytes:
    return b"I" + xid_of(xid) + u32(oid) + b"N" + new


def update(oid: int, new: bytes, old: bytes = b"", old_kind: bytes = b"", xid=None) -> bytes:
    return b"U" + xid_of(xid) + u32(oid) + old_kind + old + b"N" + new


def delete(oid: int, old_kind: bytes, old: bytes, xid=None) -> bytes:
    return b"D" + xid_of(xid) + u32(oid) + old_kind + old


def truncate(oids, options: int, xid=None) -> bytes:
    return b"T" + xid_of(xid) + u32(len(oids)) + u8(options) + b"".join(u32(o) for o in oids)


def message(flags: int, lsn: int, prefix: str, content: bytes, xid=None) -> bytes:
    return b"M" + xid_of(xid) + u8(flags) + u64(lsn) + cstr(prefix) + u32(len(content)) + content
