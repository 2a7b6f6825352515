"""The ingest loop: replication frames -> decoder -> assembler -> bronze -> confirm.

Confirmation follows durability: once a bronze commit has finished (they run in the
background, see bronze_writer.py) the slot is told the end LSN of the last whole
transaction in bronze, and nothing else. When every change received has landed and the
server reports newer WAL (changes only in unpublished tables, or none), that position is
confirmed too, so the slot never pins WAL for nothing.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass

from pipelines.config import Config
from pipelines.errors import DataError, SourceError
from pipelines.bronze.generations import Generation
from pipelines.bronze.landed import landed_lsn
from pipelines.ingest.bronze_writer import BronzeWriter
from pipelines.positions import format_lsn
from pipelines.ingest.replication import (ConnectionLost, ReplicationStream, SlotBusy,
                                          SlotUnusable)
from pipelines.ingest.transactions import ChangeAssembler
from pipelines.ingest.wire import (XLOGDATA, XLOGDATA_HEADER_SIZE, decode_frame,
                                   xlogdata_positions)
from pipelines.lake import Lake
from pipelines.metrics import count_error
from pipelines.source.lineage import LineageBroken, ensure_lineage

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
MAX_BACKOFF_SECONDS = 30.0
SLOT_BUSY_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class IngestOptions:
    until_idle: float | None = None  # stop after this long with nothing new to land
    until_lsn: int | None = None  # stop once bronze holds everything up to this LSN


@dataclass(frozen=True)
class IngestReport:
    transactions: int
    changes: int
    confirmed_lsn: int
    seconds: float


class StopRequested:
    """Set by SIGINT/SIGTERM (or a caller): finish the current step and stop cleanly."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.event.set())

    def __bool__(self) -> bool:
        return self.event.is_set()


def run_ingest(config: Config, options: IngestOptions, stop: StopRequested) -> IngestReport:
    """Stream until stopped (or idle / past an LSN), reconnecting with backoff."""
    started = time.monotonic()
    lake = Lake.from_config(config)
    generation = _lineage(config, lake, None)
    writer = BronzeWriter(lake.bronze_changes, config.source.slot, generation=generation)
    assembler = ChangeAssembler(writer, config.ingest.spill_rows, config.ingest.batch_rows)
    try:
        _connect_and_stream(writer, assembler, config, options, stop, lake, generation)
    except BaseException:
        assembler.reset()  # open streams' files: the server resends those transactions
        writer.close(raise_failure=False)  # the error being raised says more
        raise
    assembler.reset()
    writer.close()  # waits for commits in flight
    return IngestReport(assembler.transactions, assembler.changes, writer.durable.end_lsn,
                        time.monotonic() - started)


def _lineage(config: Config, lake: Lake, streaming: Generation | None) -> Generation:
    """The slot generation to stream in, checked against the source before each stream
    (lineage.py): a failover between two connections must not go unnoticed."""
    generation = ensure_lineage(config.source.dsn, config.source.slot, lake,
                                landed_lsn(lake.bronze_changes, config.source.slot))
    if streaming is not None and generation.generation != streaming.generation:
        raise LineageBroken(f"slot generation {generation.generation} started (`lakehouse "
                          "recover`) while this ingest streamed generation "
                          f"{streaming.generation}: start the ingest again")
    return generation


def _connect_and_stream(writer: BronzeWriter, assembler: ChangeAssembler, config: Config,
                        options: IngestOptions, stop: StopRequested, lake: Lake,
                        generation: Generation) -> None:
    backoff = 1.0
    ever_connected = False
    started = time.monotonic()
    while True:
        try:
            if ever_connected:
                _lineage(config, lake, generation)
            stream = ReplicationStream(config.source.dsn, config.source.slot,
                                       config.source.publication, writer.durable.end_lsn)
        except (SlotUnusable, LineageBroken):
            raise  # dropped, invalidated, failed over: retrying would look healthy forever
        except SlotBusy:
            # A predecessor killed a moment ago may still hold the slot until Postgres
            # notices; a real second ingest is an error once the grace period is over.
            if time.monotonic() - started > SLOT_BUSY_GRACE_SECONDS:
                raise
            if stop.event.wait(0.5):
                return
            continue
        except SourceError as exc:
            if not ever_connected:
                raise  # a wrong DSN should fail fast, not retry forever
            log.warning("reconnect failed (%s); retrying in %.0f s", exc, backoff)
            count_error("source")
            if stop.event.wait(backoff):
                return
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            continue
        ever_connected, backoff = True, 1.0
        try:
            done = _stream(stream, writer, assembler, config, options, stop)
        except ConnectionLost as exc:
            log.warning("replication connection lost (%s); reconnecting", exc)
            count_error("source")
            assembler.reset()
            continue
        finally:
            stream.close()
        if done:
            return


def _stream(stream: ReplicationStream, writer: BronzeWriter, assembler: ChangeAssembler,
            config: Config, options: IngestOptions, stop: StopRequested) -> bool:
    """Run one connection until the ingest should end (True); connection loss raises."""
    settings = config.ingest
    progress = _ProgressLog(settings.status_interval_seconds)
    last_activity = time.monotonic()
    stream.confirm(writer.durable.end_lsn)
    feed = assembler.feed_bytes
    while not stop:
        frames = stream.read(POLL_SECONDS)
        for frame in frames:  # the hot loop: keep per-frame work minimal
            if frame[0] == XLOGDATA:
                try:
                    feed(bytes(frame), XLOGDATA_HEADER_SIZE)  # one copy: bytes index faster
                except DataError as exc:
                    _land_and_confirm(stream, writer)
                    raise _corrupt(frame, exc) from exc
            else:
                keepalive = decode_frame(frame)
                stream.server_wal_end = max(stream.server_wal_end, keepalive.wal_end)
                if keepalive.reply_requested:
                    stream.confirm(_confirmable(stream, writer, assembler))
        if frames and frames[-1][0] == XLOGDATA:
            last_activity = time.monotonic()
            stream.server_wal_end = max(stream.server_wal_end,
                                        xlogdata_positions(frames[-1])[1])

        # Checked per read, not per frame: a commit may exceed batch_rows by one read's
        # worth of changes (ReplicationStream.read's max_frames).
        if writer.buffered_rows >= settings.batch_rows:
            writer.land(complete_only=False)
        elif writer.complete_rows and (writer.oldest_row_age >= settings.batch_seconds or (
                options.until_lsn is not None and not frames)):  # batch mode, caught up
            writer.land()
        if (writer.durable.end_lsn > stream.confirmed or not frames
                or stream.seconds_since_status() >= settings.status_interval_seconds):
            stream.confirm(_confirmable(stream, writer, assembler))
        progress.maybe_log(assembler, stream, writer)

        if options.until_lsn is not None and assembler.idle:
            if writer.progress.end_lsn >= options.until_lsn > stream.confirmed:
                # All that was asked for is committing: wait for it, not for the next read.
                stream.confirm(writer.wait().end_lsn)
            if writer.idle and stream.confirmed >= options.until_lsn:
                return True
        if options.until_idle is not None and not frames and assembler.idle \
                and time.monotonic() - last_activity >= options.until_idle:
            _land_and_confirm(stream, writer)
            stream.confirm(_confirmable(stream, writer, assembler))
            return True
    _land_and_confirm(stream, writer)  # stop requested: keep whole transactions only
    log.info("stopped: bronze holds everything up to %s", format_lsn(writer.durable.end_lsn))
    return True


def _corrupt(frame: bytes, exc: DataError) -> DataError:
    """The error for a message that cannot be processed: its LSN and a hex dump."""
    wal_start, _ = xlogdata_positions(frame)
    payload = frame[XLOGDATA_HEADER_SIZE:]
    return DataError(f"cannot process the change at {format_lsn(wal_start)}: {exc}\n"
                     f"{_hexdump(payload)}")


def _land_and_confirm(stream: ReplicationStream, writer: BronzeWriter) -> None:
    """Commit whole transactions now, wait for it, and confirm what bronze holds."""
    stream.confirm(writer.flush(complete_only=True).end_lsn)


def _confirmable(stream: ReplicationStream, writer: BronzeWriter,
                 assembler: ChangeAssembler) -> int:
    """What may be confirmed now: bronze's progress, or the server's WAL end when idle."""
    durable = writer.durable.end_lsn
    if assembler.idle and writer.idle:  # nothing received is buffered or committing
        return max(durable, stream.server_wal_end)
    return durable


class _ProgressLog:
    """A periodic line: rate, bronze freshness, slot lag."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.last = time.monotonic()
        self.last_changes = 0

    def maybe_log(self, assembler: ChangeAssembler, stream: ReplicationStream,
                  writer: BronzeWriter) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        rate = (assembler.changes - self.last_changes) / (now - self.last)
        lag = (time.time() - assembler.last_commit_ts / 1e6) if assembler.last_commit_ts else 0
        log.info("%.0f changes/s, %d transactions, bronze at %s (newest commit %.1f s old), "
                 "slot lag %d bytes", rate, assembler.transactions,
                 format_lsn(writer.durable.end_lsn), lag,
                 max(0, stream.server_wal_end - stream.confirmed))
        self.last, self.last_changes = now, assembler.changes


def _hexdump(data: bytes | memoryview, limit: int = 256) -> str:
    raw = bytes(data[:limit])
    lines = [f"{offset:08x}  {raw[offset:offset + 16].hex(' ')}"
             for offset in range(0, len(raw), 16)]
    more = f"\n... {len(data) - limit} more bytes" if len(data) > limit else ""
    return "\n".join(lines) + more
