"""Streaming replication CopyData frames, as pure functions over bytes.

The server sends XLogData ('w', carrying one pgoutput message) and Primary keepalive
('k'); the client answers with Standby status updates ('r'). Reading the socket and
reading the clock stay with the caller, so these functions are testable from bytes.
Format: https://www.postgresql.org/docs/current/protocol-replication.html
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias, Union

from pipelines.errors import DataError
from pipelines.positions import MAX_LSN
from pipelines.ingest.pgoutput import timestamp_from_pg, timestamp_to_pg

_XLOG_DATA = struct.Struct("!QQq")  # wal start, wal end, send time
_XLOG_POSITIONS = struct.Struct("!QQ")  # wal start, wal end
XLOGDATA = 0x77  # 'w'
XLOGDATA_HEADER_SIZE = 1 + _XLOG_DATA.size  # the pgoutput message starts here
_KEEPALIVE = struct.Struct("!QqB")  # wal end, send time, reply requested
_STANDBY_STATUS = struct.Struct("!cQQQqB")  # 'r', write, flush, apply, client time, reply


class WireDecodeError(DataError, ValueError):
    """A CopyData frame that is not a valid replication message; `offset` is where it failed."""

    def __init__(self, problem: str, offset: int) -> None:
        super().__init__(f"{problem} at offset {offset}")
        self.offset = offset


@dataclass(frozen=True, slots=True)
class XLogData:
    """WAL data: `payload` is one pgoutput message, a view into the frame (no copy)."""

    wal_start: int
    wal_end: int
    send_time: datetime
    payload: memoryview


@dataclass(frozen=True, slots=True)
class PrimaryKeepalive:
    """Server heartbeat; answer at once when `reply_requested`, or the server may time out."""

    wal_end: int
    send_time: datetime
    reply_requested: bool


ServerFrame: TypeAlias = Union[XLogData, PrimaryKeepalive]


def xlogdata_positions(frame: bytes) -> tuple[int, int]:
    """(wal_start, wal_end) of an XLogData frame, without building the dataclass.

    The ingest's hot loop slices the payload at XLOGDATA_HEADER_SIZE itself; this reads
    the positions it needs for progress and error reports.
    """
    if len(frame) < XLOGDATA_HEADER_SIZE or frame[0] != XLOGDATA:
        decode_frame(frame)  # raises the precise error
    return _XLOG_POSITIONS.unpack_from(frame, 1)


def decode_frame(frame: bytes | bytearray | memoryview) -> ServerFrame:
    """Decode one CopyData frame sent by the server during START_REPLICATION."""
    view = memoryview(frame).cast("B")
    if not view:
        raise WireDecodeError("empty CopyData frame", 0)
    kind = view[0]
    if kind == 0x77:  # 'w'
        wal_start, wal_end, send_time = _unpack(_XLOG_DATA, view, "XLogData header")
        return XLogData(wal_start, wal_end, _send_time(send_time, 17), view[1 + _XLOG_DATA.size :])
    if kind == 0x6B:  # 'k'
        wal_end, send_time, reply = _unpack(_KEEPALIVE, view, "Primary keepalive")
        end = 1 + _KEEPALIVE.size
        if len(view) > end:
            raise WireDecodeError(f"{len(view) - end} trailing bytes after Primary keepalive", end)
        return PrimaryKeepalive(wal_end, _send_time(send_time, 9), reply == 1)
    raise WireDecodeError(f"unknown CopyData frame type {chr(kind)!r} (0x{kind:02x})", 0)


def encode_standby_status_update(
    write_lsn: int,
    flush_lsn: int,
    apply_lsn: int,
    client_time: datetime,
    *,
    reply_requested: bool = False,
) -> bytes:
    """Build the 'r' frame that reports progress; the server may recycle WAL up to `flush_lsn`."""
    for name, lsn in (("write_lsn", write_lsn), ("flush_lsn", flush_lsn), ("apply_lsn", apply_lsn)):
        if not 0 <= lsn <= MAX_LSN:
            raise ValueError(f"{name} {lsn} is outside 0..2**64-1")
    return _STANDBY_STATUS.pack(
        b"r", write_lsn, flush_lsn, apply_lsn, timestamp_to_pg(client_time), reply_requested
    )


def _unpack(layout: struct.Struct, view: memoryview, what: str) -> tuple:
    """Unpack `layout` right after the type byte."""
    if len(view) < 1 + layout.size:
        raise WireDecodeError(f"truncated frame: {what} needs {layout.size} bytes, {len(view) - 1} left", 1)
    return layout.unpack_from(view, 1)


def _send_time(micros: int, offset: int) -> datetime:
    try:
        return timestamp_from_pg(micros)
    except ValueError as exc:
        raise WireDecodeError(f"send time: {exc}", offset) from None
