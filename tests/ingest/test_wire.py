"""Replication CopyData frames: XLogData and keepalive in, standby status update out."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

import pytest

from pipelines.errors import DataError
from pipelines.ingest.pgoutput import StreamStop, decode_message
from pipelines.ingest.wire import (
    PrimaryKeepalive,
    WireDecodeError,
    XLogData,
    decode_frame,
    encode_standby_status_update,
)

BIG_LSN = 2**64 - 2
TS_US = 757_382_400_123_456
TS = datetime(2024, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc)


def xlog_data(start: int, end: int, ts_us: int, payload: bytes) -> bytes:
    return b"w" + struct.pack("!QQq", start, end, ts_us) + payload


def keepalive(end: int, ts_us: int, reply: int) -> bytes:
    return b"k" + struct.pack("!QqB", end, ts_us, reply)


@pytest.mark.parametrize("wrap", [bytes, memoryview])
def test_xlog_data_payload_is_a_view_that_decodes(wrap):
    frame = wrap(xlog_data(BIG_LSN - 1, BIG_LSN, TS_US, b"E"))
    parsed = decode_frame(frame)
    assert isinstance(parsed, XLogData)
    assert (parsed.wal_start, parsed.wal_end, parsed.send_time) == (BIG_LSN - 1, BIG_LSN, TS)
    assert isinstance(parsed.payload, memoryview) and parsed.payload == b"E"
    assert decode_message(parsed.payload) == StreamStop()


def test_xlog_data_with_empty_payload():
    assert decode_frame(xlog_data(1, 2, 0, b"")).payload == b""


@pytest.mark.parametrize(("flag", "reply"), [(1, True), (0, False)])
def test_primary_keepalive(flag, reply):
    assert decode_frame(keepalive(BIG_LSN, TS_US, flag)) == PrimaryKeepalive(BIG_LSN, TS, reply)


def test_standby_status_update_bytes():
    frame = encode_standby_status_update(BIG_LSN, BIG_LSN - 1, 0x16_B374D848, TS, reply_requested=True)
    assert frame == b"r" + struct.pack("!QQQqB", BIG_LSN, BIG_LSN - 1, 0x16_B374D848, TS_US, 1)
    assert encode_standby_status_update(1, 1, 1, TS)[-1] == 0


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_standby_status_update_refuses_lsn_out_of_range(bad):
    with pytest.raises(ValueError, match="flush_lsn"):
        encode_standby_status_update(1, bad, 1, TS)


def test_standby_status_update_refuses_naive_time():
    with pytest.raises(ValueError, match="timezone-aware"):
        encode_standby_status_update(1, 1, 1, datetime(2024, 1, 1))


@pytest.mark.parametrize(
    ("frame", "problem", "offset"),
    [
        (b"", "empty CopyData frame", 0),
        (b"r" + bytes(34), "unknown CopyData frame type 'r'", 0),
        (xlog_data(1, 2, 3, b"")[:-1], "XLogData header needs 24 bytes, 23 left", 1),
        (keepalive(1, 2, 0)[:-1], "Primary keepalive needs 17 bytes, 16 left", 1),
        (keepalive(1, 2, 0) + b"\x00", "1 trailing bytes after Primary keepalive", 18),
        (keepalive(1, 2**63 - 1, 0), "send time: Postgres timestamp", 9),
    ],
)
def test_decode_frame_errors(frame, problem, offset):
    with pytest.raises(WireDecodeError) as excinfo:
        decode_frame(frame)
    assert problem in str(excinfo.value) and excinfo.value.offset == offset


def test_wire_decode_error_is_a_value_error_and_a_data_error():
    assert issubclass(WireDecodeError, ValueError) and issubclass(WireDecodeError, DataError)
