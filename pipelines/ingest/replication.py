"""The replication connection: START_REPLICATION over libpq, frames in, status out.

This module owns the connection and what is confirmed to Postgres. It confirms only what
the caller says is durable (`confirm`), never the LSN of a data message, and never less
than the slot already holds.
"""

from __future__ import annotations

import logging
import select
import time
from datetime import datetime, timezone

from psycopg import pq

from pipelines.errors import SourceError
from pipelines.names import pg_identifier
from pipelines.positions import format_lsn, parse_lsn
from pipelines.ingest.wire import encode_standby_status_update
from pipelines.source.lineage import RECOVER
from pipelines.source.text_format import with_text_format

log = logging.getLogger(__name__)


class SlotUnusable(SourceError):
    """The slot is missing or invalidated: reconnecting cannot help, stop (exit 3)."""


class SlotBusy(SourceError):
    """Another connection streams from the slot (maybe a predecessor still exiting)."""


class ConnectionLost(Exception):
    """The replication connection broke; reconnecting may help."""


class ReplicationStream:
    """One START_REPLICATION session on a logical slot with pgoutput."""

    def __init__(self, dsn: str, slot: str, publication: str, start_lsn: int) -> None:
        self.slot = slot
        self.confirmed = start_lsn
        self.server_wal_end = start_lsn  # newest server WAL position heard of
        self._conn = _connect(with_text_format(dsn, replication="database"))
        try:
            self.protocol_version = 2 if self._conn.server_version >= 140000 else 1
            self.confirmed = max(start_lsn, self._slot_confirmed())
            self._start(publication, start_lsn)
        except BaseException:
            self._conn.finish()
            raise
        self._conn.nonblocking = 1
        self._last_status = 0.0

    def _slot_confirmed(self) -> int:
        """Where the server already has the slot (0: unknown).

        A status below it would move the slot back: Postgres before 18 takes any flush
        position it is sent. Repeating the server's own position confirms nothing new.
        """
        literal = "'" + self.slot.replace("'", "''") + "'"  # no parameters on this protocol
        result = self._conn.exec_(b"SELECT confirmed_flush_lsn::text FROM "
                                  b"pg_replication_slots WHERE slot_name = " + literal.encode())
        if result.status != pq.ExecStatus.TUPLES_OK or not result.ntuples:
            return 0  # START_REPLICATION says what is wrong with the slot
        value = result.get_value(0, 0)
        return parse_lsn(value.decode()) if value else 0

    def _start(self, publication: str, start_lsn: int) -> None:
        options = [("proto_version", str(self.protocol_version)),
                   ("publication_names", pg_identifier(publication)),
                   ("messages", "true")]
        if self.protocol_version >= 2:
            options.append(("streaming", "on"))
        opts = ", ".join(f"{k} '{v.replace(chr(39), chr(39) * 2)}'" for k, v in options)
        command = (f"START_REPLICATION SLOT {pg_identifier(self.slot)} LOGICAL "
                   f"{format_lsn(start_lsn)} ({opts})")
        result = self._conn.exec_(command.encode())
        if result.status != pq.ExecStatus.COPY_BOTH:
            message = (result.error_message or self._conn.error_message).decode(
                errors="replace").strip()
            if "is active for PID" in message:
                raise SlotBusy(f"{message}: another ingest is streaming from slot "
                               f"{self.slot!r}. Stop it, or configure another slot.")
            if "does not exist" in message:
                raise SlotUnusable(f"{message}. On a new lake run `lakehouse setup` first; if "
                                   "the slot was dropped, changes since were lost to the "
                                   f"lake: {RECOVER}")
            if "invalidated" in message or "can no longer get changes" in message:
                raise SlotUnusable(f"{message}. Changes were lost to the lake: {RECOVER}")
            raise SourceError(f"START_REPLICATION failed: {message}")
        log.info("streaming slot %s from %s (pgoutput v%d)", self.slot, format_lsn(start_lsn),
                 self.protocol_version)

    def read(self, timeout: float, max_frames: int = 2000) -> list[bytes]:
        """The CopyData frames available now (waiting up to `timeout` for the first).

        Frames stay raw bytes: the caller slices XLogData payloads itself, because a
        dataclass per frame costs more than decoding the pgoutput message inside it.
        """
        conn = self._conn
        frames: list[bytes] = []
        get_copy_data, append = conn.get_copy_data, frames.append  # once, not per frame
        deadline = time.monotonic() + timeout
        while len(frames) < max_frames:
            size, data = get_copy_data(1)
            if size > 0:
                append(data)
                continue
            if size == -1:
                result = conn.get_result()
                detail = result.error_message.decode(errors="replace") if result else ""
                raise ConnectionLost(f"server ended the replication stream {detail}".strip())
            if size == -2:
                raise ConnectionLost(conn.error_message.decode(errors="replace").strip())
            remaining = deadline - time.monotonic()
            if frames or remaining <= 0:
                break
            readable, _, _ = select.select([conn.socket], [], [], remaining)
            if readable:
                try:
                    conn.consume_input()
                except Exception as exc:  # psycopg raises OperationalError on a dead socket
                    raise ConnectionLost(str(exc)) from exc
        return frames

    def confirm(self, lsn: int, reply_requested: bool = False) -> None:
        """Send a standby status update saying everything up to `lsn` is durable."""
        self.confirmed = max(self.confirmed, lsn)
        payload = encode_standby_status_update(self.confirmed, self.confirmed, self.confirmed,
                                               datetime.now(timezone.utc),
                                               reply_requested=reply_requested)
        try:
            sent = self._conn.put_copy_data(payload) == 1 and self._conn.flush() == 0
        except Exception as exc:  # psycopg raises OperationalError on a dead socket
            raise ConnectionLost(str(exc)) from exc
        if not sent:
            raise ConnectionLost(self._conn.error_message.decode(errors="replace"))
        self._last_status = time.monotonic()

    def seconds_since_status(self) -> float:
        return time.monotonic() - self._last_status

    def close(self) -> None:
        """End the COPY cleanly so the slot is released at once."""
        try:
            self._conn.put_copy_end()
            self._conn.flush()
        except Exception:  # closing a broken connection: nothing left to save
            pass
        self._conn.finish()


def _connect(conninfo: str) -> pq.PGconn:
    conn = pq.PGconn.connect(conninfo.encode())
    if conn.status != pq.ConnStatus.OK:
        message = conn.error_message.decode(errors="replace").strip()
        conn.finish()
        raise SourceError(f"cannot open a replication connection: {message}. Check the DSN, "
                          "that pg_hba.conf allows replication connections for this user, "
                          "and that the role has the REPLICATION privilege.")
    return conn

