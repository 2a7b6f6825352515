"""Bronze landing: buffer change rows and append them to Delta with delta-rs.

Each commit records the slot's progress in the same atomic Delta commit: the end LSN of
the last whole transaction landed (Delta app transaction, app id = slot name) and the
last landed position (commit metadata). After any crash the ingest reads both back and
skips exactly what bronze already holds, so no position lands twice or goes missing.

Commits run on one background thread, in order, so the replication stream keeps being
read while a batch is converted and written. On a local disk that gains little (the
socket buffers absorb a short pause); it hides part of a remote store's commit latency
(measured with a simulated 200 ms per commit: 1M changes in 100-change transactions
took 7.9 s, against 9.2 s committing inline and 5.5 s without the delay). What may be
confirmed to Postgres is only `BronzeWriter.durable`, which advances after a commit has
finished. A streamed transaction's changes are encoded to Parquet while it streams in
(bronze_files.py, on an encoder thread) and committed as files at its Stream Commit.
"""

from __future__ import annotations

import logging
import queue
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np
import pyarrow as pa
from deltalake import (ColumnProperties, CommitProperties, DeltaTable, Transaction,
                       WriterProperties, write_deltalake)
from deltalake.exceptions import TableNotFoundError

from pipelines.bronze.landed import HISTORY_LOOKBACK, newest_landed, position_metadata
from pipelines.bronze.schema import CHANGES_SCHEMA
from pipelines.errors import DataError
from pipelines.ingest.bronze_files import (
    SCALAR_COLUMNS, PendingFile, can_patch_in_place, write_pending)
from pipelines.ingest.records import RECORD_SCHEMA, Record, record_batch
from pipelines import storage
from pipelines.bronze.generations import Generation, first_generation
from pipelines.lake import Where, location, with_log_retention
from pipelines.ingest.landed_metrics import LANDED_BYTES, LANDED_CHANGES
from pipelines.positions import Position

log = logging.getLogger(__name__)

NO_POSITION: Position = (0, -1)
ALL_LANDED = 1 << 62  # first_new_index of a transaction older than bronze's last position

# Parquet settings for bronze files, measured on 50k-change batches of the bench workload:
# ZSTD makes files half the size of delta-rs's default Snappy for the same CPU, and
# statistics only on the scalar columns (the ones Delta data skipping reads, commit_lsn
# first) save a tenth of the write CPU that list elements' min/max cost for nothing.
WRITER_PROPERTIES = WriterProperties(
    compression="ZSTD",
    default_column_properties=ColumnProperties(statistics_enabled="NONE"),
    column_properties={name: ColumnProperties(statistics_enabled="CHUNK")
                       for name in SCALAR_COLUMNS})


@dataclass(frozen=True)
class Progress:
    """What bronze durably holds: confirmable end LSN and the last landed position."""

    end_lsn: int = 0
    position: Position = NO_POSITION


def read_progress(where: Where, app_id: str,
                  generation: Generation | None = None) -> Progress:
    """Progress recorded by the last ingest commit, in the source LSNs of `generation`
    (default: the first; nothing of an older one counts); creates an empty table if
    missing."""
    generation = generation or first_generation(app_id)
    changes = location(where)
    try:
        table = changes.open()
    except TableNotFoundError:
        changes.create(CHANGES_SCHEMA, configuration=changes.retention_properties,
                       name="bronze_changes", description="raw Postgres change log "
                       "(pgoutput), one row per change")
        return Progress()
    end_lsn = generation.to_source(table.transaction_version(app_id) or 0)
    newest = newest_landed(table.history(limit=HISTORY_LOOKBACK))
    if newest is None or newest[0] < generation.lake_start_lsn:
        return Progress(end_lsn)
    return Progress(end_lsn, (generation.to_source(newest[0]), newest[1]))


class BronzeWriter:
    """Buffer of bronze records in position order, committed to Delta in the background.

    The buffer holds records (see `Record`) and, once per transaction, its commit LSN,
    xid, commit time and first change index (`begin`); a record's change index is its
    place in the transaction. That keeps the per-change cost of the hot path to one list
    append; a commit expands the transaction fields and lets Arrow convert whole columns.

    `land()` hands buffered rows to a background thread that converts and commits them,
    in order, after waiting for the previous commit: one batch commits while the next
    fills, so memory holds two batches. `progress` covers everything handed over,
    `durable` what bronze commits hold: only `durable` may be confirmed. A failed commit
    stops all later ones (they would skip its positions) and is raised by the next call
    that lands or reads `durable`.
    """

    def __init__(self, where: Where, app_id: str,
                 writer_properties: WriterProperties | None = WRITER_PROPERTIES,
                 generation: Generation | None = None) -> None:
        self.location = location(where)
        self.app_id = app_id
        self.writer_properties = writer_properties
        # Positions in memory are the source's; commits add the generation's offset.
        self.offset = generation.lsn_offset if generation else 0
        self.progress = read_progress(self.location, app_id, generation)  # handed to commits
        self._durable = self.progress  # what finished commits hold
        self._rows: list[Record] = []  # never replaced: `append` stays bound to it
        self.append = self._rows.append
        """Buffer one record of the current transaction (the hot path: a bound method)."""
        self._spans: list[_Span] = []  # the transaction of each stretch of _rows
        self._boundaries: list[tuple[int, int]] = []  # (rows after a whole txn, its end LSN)
        self._first_row_at = 0.0
        self._batches: queue.Queue[_Batch | _Files | None] = queue.Queue()  # at most one
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="bronze-encode")
        self._committer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._table: DeltaTable | None = None  # the committer's: kept, not reloaded per commit

    @cached_property
    def spill_directory(self) -> Path:
        """Where a streamed transaction's files are written before its commit: the table's
        own directory on a file system (a commit then only adds them), else a local
        temporary directory (an object store cannot overwrite part of a file)."""
        if storage.store_kind(self.location.uri) is None:
            return Path(self.location.uri)
        return Path(tempfile.mkdtemp(prefix="lakehouse-spill-"))

    @cached_property
    def files_patchable(self) -> bool:
        """Whether land_files may be used here: never on an object store (decided by the
        URL); on a file system probed once, at the first streamed commit."""
        if storage.store_kind(self.location.uri) is None and can_patch_in_place(
                self.spill_directory):
            return True
        log.info("%s cannot overwrite files in place: streamed transactions are read back "
                 "at their commit", self.location)
        return False

    @property
    def buffered_rows(self) -> int:
        return len(self._rows)

    @property
    def complete_rows(self) -> int:
        """Rows of whole transactions (and non-transactional messages) in the buffer."""
        return self._boundaries[-1][0] if self._boundaries else 0

    @property
    def oldest_row_age(self) -> float:
        return time.monotonic() - self._first_row_at if self._rows else 0.0

    @property
    def durable(self) -> Progress:
        """What bronze holds now: the only progress that may be confirmed to Postgres."""
        self._raise_failure()
        return self._durable

    @property
    def idle(self) -> bool:
        """Nothing buffered and nothing being committed: `durable` covers every row added."""
        return not self._rows and self._batches.unfinished_tasks == 0

    @property
    def next_index(self) -> int:
        """The change index the next appended record gets in the current transaction."""
        span = self._spans[-1]
        return span.first_index + len(self._rows) - span.start

    def landed(self, commit_lsn: int, index: int) -> bool:
        """True if bronze already holds (or is committing) this position: a replay."""
        last_lsn, last_index = self.progress.position
        return commit_lsn < last_lsn or (commit_lsn == last_lsn and index <= last_index)

    def first_new_index(self, commit_lsn: int) -> int:
        """The first change index of transaction `commit_lsn` not landed yet (see `landed`)."""
        last_lsn, last_index = self.progress.position
        if commit_lsn > last_lsn:
            return 0
        return last_index + 1 if commit_lsn == last_lsn else ALL_LANDED

    def begin(self, commit_lsn: int, first_index: int, xid: int | None,
              commit_ts: int | None) -> None:
        """Records appended from now on belong to this transaction, from `first_index` on.

        commit_ts is in Unix microseconds; a non-transactional message has no xid or time.
        """
        if not self._rows:
            self._first_row_at = time.monotonic()
        self._spans.append(_Span(len(self._rows), commit_lsn, first_index, xid, commit_ts))

    def end_unit(self, end_lsn: int | None, commit_lsn: int | None = None) -> None:
        """Everything buffered so far forms whole transactions; end_lsn is the last one's
        end, commit_lsn that transaction's commit LSN (None: not a transaction's end)."""
        end = end_lsn if end_lsn is not None else (
            self._boundaries[-1][1] if self._boundaries else self.progress.end_lsn)
        if (not self._rows and end > self.progress.end_lsn and commit_lsn is not None
                and self.progress.position[0] == commit_lsn):
            # Its rows went to commits before its end was known (a batch filled up at its
            # last change): no later landing would carry this end LSN until another
            # transaction's rows land, so a commit of the progress alone records it. A
            # transaction without rows (Postgres 13/14 send Begin/Commit even for
            # unpublished changes) waits for the idle confirm instead.
            self._submit(_Files([], 0, 0, Progress(end, self.progress.position)))
            return
        self._boundaries.append((len(self._rows), end))

    def discard_incomplete(self) -> None:
        """Drop rows of a transaction that will be resent (after a lost connection)."""
        keep = self.complete_rows
        del self._rows[keep:]
        self._spans = [span for span in self._spans if span.start < keep]

    def land(self, complete_only: bool = True) -> None:
        """Hand buffered rows (only whole transactions if complete_only) to one commit.

        Returns once the committer has taken them, after finishing the previous commit.
        """
        self._raise_failure()
        count = self.complete_rows if complete_only else len(self._rows)
        if count == 0:
            return
        end_lsn = self.progress.end_lsn
        for rows, end in self._boundaries:
            if rows <= count:
                end_lsn = end
        rows = self._rows[:count]
        del self._rows[:count]
        spans, self._spans = _split_spans(self._spans, count)
        self._boundaries = [(rows_ - count, end) for rows_, end in self._boundaries
                            if rows_ > count]
        self._first_row_at = time.monotonic()
        last = spans[-1]
        self._submit(_Batch(rows, spans, Progress(
            end_lsn, (last.commit_lsn, last.first_index + count - 1 - last.start))))

    def land_arrow(self, records: Sequence[pa.RecordBatch], commit_lsn: int,
                   first_index: int, xid: int, commit_ts: int,
                   end_lsn: int | None = None) -> None:
        """Commit records already in Arrow (RECORD_SCHEMA) as changes `first_index`, ...
        of one transaction (a streamed transaction's spill); `end_lsn` if they end it.

        Whole transactions buffered before land first; the buffer must hold no others.
        """
        self._land_before_stream()
        table = pa.Table.from_batches(records, schema=RECORD_SCHEMA)
        if table.num_rows:
            span = _Span(0, commit_lsn, first_index, xid, commit_ts)
            end = self.progress.end_lsn if end_lsn is None else end_lsn
            self._submit(_Batch(table, [span], Progress(
                end, (commit_lsn, first_index + table.num_rows - 1))))

    def encode_pending(self, records: pa.Table, first_index: int,
                       xid: int) -> Future[PendingFile]:
        """Encode records (RECORD_SCHEMA) of an unfinished transaction to a bronze file on
        the encoder thread (in order): a Future of its PendingFile, for `land_files`."""
        return self._encoder.submit(write_pending, self.spill_directory, records,
                                    first_index, xid)

    def land_files(self, files: Sequence[PendingFile], commit_lsn: int, commit_ts: int,
                   end_lsn: int) -> None:
        """Commit the files of one whole transaction (written from its change 0 on, in
        order) as one Delta commit, after whole transactions buffered before."""
        self._land_before_stream()
        rows = sum(file.rows for file in files)
        self._submit(_Files(list(files), commit_lsn, commit_ts,
                            Progress(end_lsn, (commit_lsn, rows - 1))))

    def _land_before_stream(self) -> None:
        """Land the whole transactions buffered before a streamed one; none may be open."""
        self.land()
        if self._rows:
            raise DataError("a streamed transaction committed inside an open transaction")

    def _submit(self, batch: _Batch | _Files) -> None:
        """Hand one commit to the committer once the previous one has finished; what it
        holds counts as landed from now on (`progress`)."""
        self.progress = batch.progress
        if self._committer is None:
            self._committer = threading.Thread(target=self._commit_batches,
                                               name="bronze-commit", daemon=True)
            self._committer.start()
        self._batches.join()  # one batch commits while the next fills: memory for two
        self._batches.put(batch)

    def wait(self) -> Progress:
        """Block until every batch handed over is committed; returns `durable`."""
        self._batches.join()
        return self.durable

    def flush(self, complete_only: bool = True) -> Progress:
        """Land buffered rows and wait for the commit: returns what bronze now holds."""
        self.land(complete_only)
        return self.wait()

    def close(self, raise_failure: bool = True) -> None:
        """Wait for pending commits and stop the background thread."""
        self._encoder.shutdown()
        if self._committer is not None:
            self._batches.put(None)
            self._committer.join()
            self._committer = None
        spill = self.__dict__.get("spill_directory")
        if spill is not None and spill != Path(self.location.uri):
            shutil.rmtree(spill, ignore_errors=True)
        if raise_failure:
            self._raise_failure()

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _commit_batches(self) -> None:
        """The background thread: commit batches in order; after a failure, none."""
        while True:
            batch = self._batches.get()
            try:
                if batch is None:
                    return
                if self._error is None:
                    self._commit(batch)
            except BaseException as exc:  # handed to the main thread by _raise_failure
                self._error = exc
            finally:
                self._batches.task_done()

    def _commit(self, batch: _Batch | _Files) -> None:
        position = batch.progress.position
        if self._table is None:  # the ingest is bronze/changes' only writer
            # Every commit carries the position read_progress looks for, this one too:
            # the log may keep nothing older than it (lake.log_retention).
            landed = self._durable.position
            self._table = with_log_retention(
                self.location.open(),
                position_metadata((landed[0] + self.offset, landed[1]))
                if landed != NO_POSITION else None, retention=self.location.log_retention)
        properties = CommitProperties(
            app_transactions=[Transaction(app_id=self.app_id,
                                          version=batch.progress.end_lsn + self.offset)],
            custom_metadata=position_metadata((position[0] + self.offset, position[1])))
        if isinstance(batch, _Files):
            now = _now_micros()
            actions = [file.finish(batch.commit_lsn + self.offset, batch.commit_ts, now)
                       for file in batch.files]
            self._table.create_write_transaction(actions, mode="append", schema=CHANGES_SCHEMA,
                                                 commit_properties=properties)
            self._table.update_incremental()  # unlike a write, this leaves the state behind
            rows, nbytes = sum(f.rows for f in batch.files), sum(f.nbytes for f in batch.files)
        else:
            records = batch.records
            if isinstance(records, list):
                records = record_batch(records)
            changes = _changes_table(records, batch.spans, self.offset)
            write_deltalake(  # a DeltaTable, not its path: a write then updates its state
                self._table, changes, mode="append",
                writer_properties=self.writer_properties, commit_properties=properties)
            rows, nbytes = changes.num_rows, changes.nbytes
        self._durable = batch.progress
        LANDED_CHANGES.inc(rows)
        LANDED_BYTES.inc(nbytes)


class _Span(NamedTuple):  # not a dataclass: one per transaction, so cheap to create
    """Buffered rows from `start` (to the next span) belong to one transaction."""

    start: int
    commit_lsn: int
    first_index: int
    xid: int | None
    commit_ts: int | None


@dataclass(frozen=True)
class _Batch:
    """Records handed to one commit, their transactions and the progress it records."""

    records: list[Record] | pa.Table
    spans: list[_Span]
    progress: Progress


@dataclass(frozen=True)
class _Files:
    """Files of one whole transaction (none: a commit of progress only) and the progress
    their commit records."""

    files: list[PendingFile]
    commit_lsn: int
    commit_ts: int
    progress: Progress


def _split_spans(spans: list[_Span], count: int) -> tuple[list[_Span], list[_Span]]:
    """Spans of the first `count` rows, and of the rest renumbered from 0.

    A transaction cut by `count` continues in the rest at the change index after the cut.
    """
    taken = [span for span in spans if span.start < count]
    rest = [span._replace(start=span.start - count) for span in spans if span.start >= count]
    cut = taken[-1]
    if not rest or rest[0].start > 0:  # rows of the last taken span remain
        rest.insert(0, cut._replace(start=0, first_index=cut.first_index + count - cut.start))
    return taken, rest


def _changes_table(records: pa.RecordBatch | pa.Table, spans: list[_Span],
                   lsn_offset: int = 0) -> pa.Table:
    """Records plus each one's transaction fields and ingested_at: CHANGES_SCHEMA;
    commit LSNs in the lake's (source + the slot generation's offset)."""
    utc = CHANGES_SCHEMA.field("commit_ts").type
    lsn, index, xid, ts = _transaction_columns(spans, records.num_rows, lsn_offset)
    now = _now_micros()
    return pa.Table.from_arrays([
        lsn, index, xid, ts.cast(utc), *records.columns,
        pa.repeat(pa.scalar(now, pa.int64()), records.num_rows).cast(utc),
    ], schema=CHANGES_SCHEMA)


def _transaction_columns(spans: list[_Span], rows: int,
                         lsn_offset: int = 0) -> tuple[pa.Array, ...]:
    """commit_lsn, change_index, xid, commit_ts of each row, expanded from the spans.

    Vectorized (numpy repeat), not built from Python lists: 30x faster for one big
    transaction, and as fast for one span per row (single-change transactions).
    """
    starts = np.array([span.start for span in spans] + [rows], dtype=np.int64)
    counts = np.diff(starts)

    def per_row(values: list[int | None]) -> pa.Array:
        missing = np.array([value is None for value in values])
        filled = np.array([0 if value is None else value for value in values], dtype=np.int64)
        return pa.array(np.repeat(filled, counts),
                        mask=np.repeat(missing, counts) if missing.any() else None)

    first = np.array([span.first_index for span in spans], dtype=np.int64)
    index = np.arange(rows, dtype=np.int64) - np.repeat(starts[:-1] - first, counts)
    return (per_row([span.commit_lsn + lsn_offset for span in spans]), pa.array(index),
            per_row([span.xid for span in spans]), per_row([span.commit_ts for span in spans]))


def _now_micros() -> int:
    """ingested_at: Unix microseconds."""
    return int(datetime.now(timezone.utc).timestamp() * 1_000_000)
