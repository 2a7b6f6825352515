"""One table's backfill: lock, decide new/resume/skip, then pipeline its chunks.

Three stages, each a thread: the reader emits a chunk's low watermark and runs its
SELECT (raw CSV; the next cursor comes from one key row), the converter parses it into
the bronze batch, and the job's own thread commits the batch to bronze (with the chunks
waiting behind it), emits the high watermarks and moves the cursor. So Postgres reads
chunk k+1 while chunk k is converted and written, and every chunk still goes
low -> SELECT -> bronze commit -> high -> cursor.
Windows of neighbouring chunks may overlap in the WAL; silver reconciles each chunk only
against its own window, and a crash between stages leaves at most a low watermark (or
rows in bronze) without a high one, which silver never applies.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone

import psycopg
import pyarrow as pa
from deltalake.exceptions import DeltaError

from pipelines.backfill.bronze import SnapshotWriter
from pipelines.backfill.source_tables import estimated_rows, key_correlation, key_order, regclass
from pipelines.backfill.chunk import (
    FIRST_CHUNK_ROWS, RawChunk, ShapeCache, SnapshotBuilder, next_chunk_rows, read_chunk)
from pipelines.backfill.progress import ProgressDisplay
from pipelines.backfill.state import DONE, FAILED, RUNNING, BackfillState, StateStore
from pipelines.backfill.emit_watermark import emit_watermark
from pipelines.bronze.watermarks import KeyRange, Snapshot, Watermark
from pipelines.config import SourceConfig
from pipelines.errors import DataError, LakehouseError, SourceError
from pipelines.lake import Lake
from pipelines.metrics import count_error, error_kind
from pipelines.source.connection import connect
from pipelines.source.text_format import with_text_format

log = logging.getLogger(__name__)

MAX_CHUNK_BYTES = 8 << 20  # wide rows shrink the chunk (CSV bytes) so memory stays bounded
CHUNKS_IN_FLIGHT = 6  # read, converted, waiting, being written: bounded by MAX_CHUNK_BYTES each
COMMIT_BYTES = 2 * MAX_CHUNK_BYTES  # waiting chunks share a bronze commit up to this size
CHUNK_ID_BLOCK = 100  # chunk ids reserved per state write (see state.py)
LOCK_WAIT_SECONDS = 15.0  # a killed backfill's session may take a moment to go away
APPLICATION_NAME = "lakehouse backfill"
CURSOR_SAVE_SECONDS = 0.25  # persist the cursor at most this often while chunks land
# Below this |pg_stats.correlation| of a one-column key, chunks are read by key range
# (chunk.read_chunk): a random uuid key is ~0, a serial or identity key ~1.
SCATTERED_CORRELATION = 0.5


@dataclass(frozen=True)
class TableResult:
    """How one table's backfill ended in this run."""

    table: str
    status: str  # done | skipped (already done) | failed | interrupted
    backfill_id: str | None = None
    rows: int = 0  # read in this run
    chunks: int = 0
    seconds: float = 0.0
    total_rows: int = 0  # over every run of the backfill
    error: LakehouseError | None = None


@dataclass(frozen=True)
class _Raw:
    """A chunk as read, waiting to be parsed."""

    chunk_id: int
    chunk: RawChunk
    keys: KeyRange  # the keys it read: after the cursor it started from
    last: bool


@dataclass(frozen=True)
class _Read:
    """A chunk read and converted, waiting for its bronze commit."""

    chunk_id: int
    batch: pa.Table
    snapshot: Snapshot
    keys: KeyRange
    cursor_columns: tuple[str, ...]
    last: bool

    @property
    def cursor(self) -> tuple[str, ...] | None:
        """Where the next chunk starts: after this one's last key (or where it started)."""
        return self.keys.last or self.keys.after

    @property
    def size(self) -> int:
        """Bytes of the chunk's values (about its CSV size)."""
        return self.batch.column("values").nbytes


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_STOPPED = object()


class _Progress:
    """The backfill's state row, shared by the reader (chunk ids) and writer (cursor)."""

    def __init__(self, store: StateStore, state: BackfillState) -> None:
        self.store = store
        self.state = state
        # The state saved at the run's start reserved the run's first block (_begin).
        self._next_id = state.chunk_ids_reserved - CHUNK_ID_BLOCK
        self._lock = threading.Lock()

    def next_chunk_id(self) -> int:
        """A chunk id never used before in this backfill, reserved durably before use."""
        with self._lock:
            chunk_id = self._next_id
            if chunk_id >= self.state.chunk_ids_reserved:
                self.state = self.store.save(
                    replace(self.state, chunk_ids_reserved=chunk_id + CHUNK_ID_BLOCK))
            self._next_id += 1
            return chunk_id

    def chunk_done(self, item: _Read, persist: bool) -> None:
        """Advance the cursor past a chunk whose high watermark is written; maybe save it."""
        with self._lock:
            self.state = replace(
                self.state, cursor=item.cursor, cursor_columns=item.cursor_columns,
                chunks_done=self.state.chunks_done + 1,
                rows_done=self.state.rows_done + item.batch.num_rows)
            if persist:
                self.state = self.store.save(self.state)

    def save(self) -> None:
        with self._lock:
            self.state = self.store.save(self.state)

    def end(self, status: str, error: str | None = None) -> None:
        with self._lock:
            finished = datetime.now(timezone.utc) if status == DONE else None
            self.state = self.store.save(replace(self.state, status=status, error=error,
                                                 finished_at=finished))


class TableBackfill:
    """One table's backfill in this run: lock, decide new/resume/skip, pipeline the chunks."""

    def __init__(self, source: SourceConfig, table: str, chunk_size: int, restart: bool,
                 store: StateStore, lake: Lake, display: ProgressDisplay,
                 stop: threading.Event, resync_generation: int | None = None) -> None:
        self.source = source
        self.table = table
        self.chunk_size = chunk_size
        self.restart = restart
        self.resync_generation = resync_generation  # None: a plain backfill
        self.store = store
        self.lake = lake
        self.display = display
        self.stop = stop

    def run(self) -> TableResult:
        started = time.monotonic()
        progress: _Progress | None = None
        try:
            dsn = with_text_format(self.source.dsn, application_name=APPLICATION_NAME)
            with connect(dsn) as reader, connect(dsn) as writer:
                self._lock_table(reader)
                state, done_before = self._begin(reader)
                if state is None:
                    return TableResult(self.table, "skipped", done_before.backfill_id,
                                       total_rows=done_before.rows_done)
                progress = _Progress(self.store, state)
                self.display.start(self.table, state.rows_estimate, state.rows_done)
                finished = self._pipeline(reader, writer, progress)
                if finished and state.resync:
                    # After the last high watermark: silver deletes from here what the
                    # chunks did not return (a crash before DONE emits it again: harmless).
                    emit_watermark(writer, Watermark(state.backfill_id, -1, self.table,
                                                     "resync"))
                if finished:
                    progress.end(DONE)
                status = DONE if finished else "interrupted"
                self.display.finish(self.table, status)
                return TableResult(self.table, status, state.backfill_id,
                                   progress.state.rows_done - state.rows_done,
                                   progress.state.chunks_done - state.chunks_done,
                                   time.monotonic() - started, progress.state.rows_done)
        except (LakehouseError, psycopg.Error, DeltaError, OSError) as exc:
            error = _as_lakehouse_error(exc, self.table)
            log.debug("backfill of %s failed", self.table, exc_info=True)
            count_error(error_kind(exc))  # the lake's errors are storage, not the exit 4 data
            if progress is not None:  # the bar first: recording the failure may fail too
                self.display.finish(self.table, FAILED)
                self._mark_failed(progress, str(error))
            return TableResult(self.table, FAILED, progress and progress.state.backfill_id,
                               seconds=time.monotonic() - started, error=error)
        except BaseException as exc:
            if progress is not None:
                self.display.finish(self.table, FAILED)
                self._mark_failed(progress, f"{type(exc).__name__}: {exc}")
            raise

    def _lock_table(self, conn: psycopg.Connection) -> None:
        """A session advisory lock: one backfill process per table. It locks no row or table."""
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while not conn.execute(
                "SELECT pg_try_advisory_lock(hashtext('lakehouse.backfill'), "
                "%s::regclass::oid::int4)", (regclass(self.table),)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise SourceError(f"another lakehouse backfill is running {self.table} "
                                  "(it holds the table's backfill advisory lock); wait for "
                                  "it to finish or stop it")
            time.sleep(0.2)

    def _begin(self, conn: psycopg.Connection) -> tuple[BackfillState | None, BackfillState | None]:
        """(state to run, None) to resume or start a backfill; (None, done one) to skip.

        The state to run is saved with the run's first block of chunk ids reserved, so
        the first chunk waits for no further state write.
        """
        latest = self.store.latest_per_table().get(self.table)
        estimate = estimated_rows(conn, self.table)
        resync = self.resync_generation is not None
        if resync and latest is not None and not (
                latest.resync and latest.generation == self.resync_generation
                and latest.status != DONE):
            self._abandon(latest, "superseded by a resync")
            latest = None
        if latest is not None and not self.restart:
            if latest.status == DONE:
                log.info("%s: already backfilled (%s, %d rows); --restart backfills it again",
                         self.table, latest.backfill_id, latest.rows_done)
                return None, latest
            order = key_order(conn, self.table)
            if latest.cursor_columns is not None and latest.cursor_columns != order:
                raise SourceError(
                    f"{self.table}: the key changed from ({', '.join(latest.cursor_columns)}) "
                    f"to ({', '.join(order)}) since backfill {latest.backfill_id} started; "
                    "its cursor is meaningless now: run backfill --restart for this table")
            log.info("%s: resuming %s %s after %d rows", self.table, latest.kind,
                     latest.backfill_id, latest.rows_done)
            return self.store.save(replace(
                latest, status=RUNNING, error=None, rows_estimate=estimate,
                chunk_ids_reserved=latest.chunk_ids_reserved + CHUNK_ID_BLOCK)), None
        if latest is not None:
            self._abandon(latest, "restarted")
        state = BackfillState.new(str(uuid.uuid4()), self.table, estimate, resync,
                                  self.resync_generation)
        log.info("%s: starting %s %s", self.table, state.kind, state.backfill_id)
        return self.store.save(replace(state, chunk_ids_reserved=CHUNK_ID_BLOCK)), None

    def _abandon(self, latest: BackfillState, why: str) -> None:
        """Mark an unfinished backfill failed before a new one of the table starts."""
        if latest.status != DONE:
            self.store.save(replace(latest, status=FAILED, error=f"abandoned: {why}"))

    def _pipeline(self, reader: psycopg.Connection, writer: psycopg.Connection,
                  progress: _Progress) -> bool:
        """Reader and converter threads feed this thread's writer loop.

        True when the table is done, False when stopped by `self.stop`.
        """
        raw: queue.Queue = queue.Queue()
        converted: queue.Queue = queue.Queue()
        halt = threading.Event()
        slots = threading.Semaphore(CHUNKS_IN_FLIGHT)  # taken by the reader, freed by the writer
        threads = [
            threading.Thread(target=self._read_chunks, args=(reader, progress, raw, halt, slots),
                             name=f"backfill-read-{self.table}", daemon=True),
            threading.Thread(target=self._convert_chunks,
                             args=(progress.state.backfill_id, raw, converted, halt),
                             name=f"backfill-convert-{self.table}", daemon=True)]
        for thread in threads:
            thread.start()
        try:
            return self._write_chunks(writer, progress, converted, halt, slots)
        finally:
            halt.set()
            for thread in threads:
                thread.join()

    def _read_chunks(self, conn: psycopg.Connection, progress: _Progress,
                     outbox: queue.Queue, halt: threading.Event,
                     slots: threading.Semaphore) -> None:
        """Stage 1: low watermark, then the chunk's SELECT, as raw CSV."""
        state = progress.state
        shapes = ShapeCache(self.table, self.source.publication)
        cursor, limit = state.cursor, min(self.chunk_size, FIRST_CHUNK_ROWS)
        try:
            by_range = self._scattered(conn, shapes)
            # Low watermarks need not wait for their WAL flush: the high watermark's
            # synchronous commit flushes the WAL up to it, low included, before the cursor
            # moves; a low lost in a server crash takes its high with it. (The chunk
            # SELECTs are read-only and write no commit record.)
            conn.execute("SET synchronous_commit = off")
            while not (self.stop.is_set() or halt.is_set()):
                if not slots.acquire(timeout=0.1):
                    continue
                chunk_id = progress.next_chunk_id()
                emit_watermark(conn, Watermark(state.backfill_id, chunk_id, self.table, "low"))
                chunk = read_chunk(conn, shapes, cursor, limit, by_range)
                keys = KeyRange(cursor, chunk.last_key)
                cursor = chunk.last_key or cursor
                last = chunk.num_rows < limit
                _put(outbox, _Raw(chunk_id, chunk, keys, last), halt)
                if last:
                    return
                limit = next_chunk_rows(chunk.num_rows, len(chunk.data), self.chunk_size,
                                        MAX_CHUNK_BYTES)
                del chunk  # the next read must not keep this chunk's CSV alive
            _put(outbox, _STOPPED, halt)
        except BaseException as exc:  # handed down the pipeline to the writer, which raises it
            _put(outbox, _Failed(exc), halt)

    def _scattered(self, conn: psycopg.Connection, shapes: ShapeCache) -> bool:
        """Whether to read chunks by key range: a one-column key scattered on disk.

        Not for composite keys: Postgres estimates a row comparison by its first column
        alone, and a range over a few distinct first values may be planned as a
        sequential scan per chunk.
        """
        keys = shapes.current(conn).order_columns
        correlation = key_correlation(conn, self.table, keys[0]) if len(keys) == 1 else None
        scattered = correlation is not None and abs(correlation) < SCATTERED_CORRELATION
        log.info("%s: chunks are read %s", self.table,
                 f"by key range (rows are scattered on disk in key order: correlation of "
                 f"{keys[0]} {correlation:.2f})" if scattered else "in key order")
        return scattered

    def _convert_chunks(self, backfill_id: str, inbox: queue.Queue, outbox: queue.Queue,
                        halt: threading.Event) -> None:
        """Stage 2: parse the CSV and build the bronze batch (columnar, GIL mostly free)."""
        builder = SnapshotBuilder(backfill_id)
        try:
            while (item := _get(inbox, halt)) is not None:
                if item is _STOPPED or isinstance(item, _Failed):
                    _put(outbox, item, halt)
                    return
                raw: RawChunk = item.chunk
                batch = builder.rows(raw.parse(), item.chunk_id)
                _put(outbox, _Read(item.chunk_id, batch, raw.snapshot, item.keys,
                                   raw.shape.order_columns, item.last), halt)
                if item.last:
                    return
                del item, raw, batch  # waiting for the next chunk must not hold this one
        except BaseException as exc:
            _put(outbox, _Failed(exc), halt)

    def _write_chunks(self, conn: psycopg.Connection, progress: _Progress,
                      inbox: queue.Queue, halt: threading.Event,
                      slots: threading.Semaphore) -> bool:
        """Stage 3: bronze commit, high watermarks, cursor.

        Chunks that are already waiting when a commit starts share it (each delta-rs
        commit costs ~5 ms of CPU however small), and their high watermarks follow it in
        chunk order: each chunk still goes low -> SELECT -> bronze commit -> high.
        """
        backfill_id = progress.state.backfill_id
        snapshots = SnapshotWriter(self.lake.bronze_snapshots, backfill_id, self.table)
        saved = 0.0  # the run's first chunk is always saved: status shows progress at once
        pending = None  # an item taken from the inbox that the last group left out
        while (item := pending or _get(inbox, halt)) is not None:
            pending = None
            if isinstance(item, _Failed):
                raise item.error
            if item is _STOPPED:
                progress.save()
                return False
            group, size = [item], item.size
            while not group[-1].last and (waiting := _waiting(inbox)) is not None:
                if not isinstance(waiting, _Read) or size + waiting.size > COMMIT_BYTES:
                    pending = waiting  # handled after this group, or opens the next one
                    break
                group.append(waiting)
                size += waiting.size
            snapshots.append([(read.chunk_id, read.batch) for read in group])
            for read in group:
                emit_watermark(conn, Watermark(backfill_id, read.chunk_id, self.table, "high",
                                               read.snapshot, read.batch.num_rows, read.keys))
                slots.release()
                # The cursor is saved after the first chunk, then at most every
                # CURSOR_SAVE_SECONDS (the run's end saves the last): a crash re-reads a
                # little more, under new chunk ids, instead of every chunk paying for a
                # commit of the state table.
                persist = time.monotonic() - saved >= CURSOR_SAVE_SECONDS
                progress.chunk_done(read, persist)
                if persist:
                    saved = time.monotonic()
                self.display.advance(self.table, read.batch.num_rows)  # bars and metrics
                if read.last:
                    return True
            del item, group, read  # the reader may fill the freed slots while this loop waits
        raise RuntimeError("backfill pipeline halted")  # unreachable: halt is set on exit

    def _mark_failed(self, progress: _Progress, error: str) -> None:
        try:
            progress.end(FAILED, error)
        except Exception:  # the original error matters more than this one
            log.warning("could not record the failure of %s's backfill", self.table,
                        exc_info=True)


def _as_lakehouse_error(exc: BaseException, table: str) -> LakehouseError:
    """Source trouble is exit 3; a lake that cannot be written is reported as exit 4."""
    if isinstance(exc, LakehouseError):
        return exc
    if isinstance(exc, psycopg.Error):
        return SourceError(f"backfill of {table} failed: {str(exc).strip()}")
    return DataError(f"backfill of {table} could not write the lake: {exc}")


def _put(outbox: queue.Queue, item: object, halt: threading.Event) -> None:
    while not halt.is_set():
        try:
            outbox.put(item, timeout=0.1)
            return
        except queue.Full:
            pass


def _waiting(inbox: queue.Queue) -> object | None:
    """The next item if one is already queued, else None."""
    try:
        return inbox.get_nowait()
    except queue.Empty:
        return None


def _get(inbox: queue.Queue, halt: threading.Event) -> object | None:
    """The next item, or None once the pipeline is halted."""
    while not halt.is_set():
        try:
            return inbox.get(timeout=0.1)
        except queue.Empty:
            pass
    return None
