"""Transaction assembly: pgoutput messages -> bronze rows with positions.

A row's position is (commit LSN of its transaction, 0-based index of the row in it).
Plain transactions know their commit LSN at Begin (final_lsn), so their rows go straight
to the writer. Streamed transactions (protocol v2) arrive in pieces, interleaved, before
their commit LSN is known: they are kept per transaction (streamed.py, in bronze Parquet
files past `spill_rows`), so memory stays bounded whatever the transaction size. An aborted
stream (or subtransaction) is discarded; a committed one lands with its final positions,
normally as the bronze files its spilled blocks were encoded to while it streamed in.

Insert, Update and Delete take the fast path (fastpath.py) from bytes straight to a
bronze record (records.py); every other message, and any the fast path declines, goes
through the reference decoder (pgoutput.py) and `records_of`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import islice

import pyarrow as pa

from pipelines.bronze.schema import OP_DELETE, OP_INSERT, OP_UPDATE
from pipelines.errors import DataError
from pipelines.ingest.bronze_writer import ALL_LANDED, BronzeWriter
from pipelines.ingest.fastpath import (BEGIN, COMMIT, ROW_MESSAGE_TYPES, decode_begin,
                                       decode_commit, decode_row_change)
from pipelines.ingest.pgoutput import (
    NULL, Begin, Commit, Delete, Insert, LogicalMessage, Origin, PgOutputMessage, Relation,
    StreamAbort, StreamCommit, StreamStart, StreamStop, Truncate, TupleData, Type, Update,
    UNCHANGED_TOAST, decode_message, timestamp_to_pg)
from pipelines.ingest.records import (Record, change_record, message_record, record_batch,
                                      truncate_record)
from pipelines.ingest.relations import RelationCache, TableInfo
from pipelines.ingest.streamed import StreamedTransaction

log = logging.getLogger(__name__)

_PG_TO_UNIX_MICROS = 946_684_800_000_000  # 2000-01-01 minus 1970-01-01


def unix_micros(moment) -> int:
    return timestamp_to_pg(moment) + _PG_TO_UNIX_MICROS


def text_values(row: TupleData, table: TableInfo) -> tuple[list[str | None], tuple[str, ...]]:
    """Tuple data as text values (None for NULL and unchanged TOAST) + unchanged columns.

    The reference path: the hot path has fastpath.decode_row_change.
    """
    if len(row) != len(table.columns):
        raise DataError(f"{table.schema}.{table.table}: tuple has {len(row)} columns, its "
                        f"Relation message {len(table.columns)}")
    values: list[str | None] = []
    unchanged: list[str] = []
    for name, value in zip(table.columns, row):
        if value.__class__ is str:
            values.append(value)
        elif value is NULL:
            values.append(None)
        elif value is UNCHANGED_TOAST:
            values.append(None)
            unchanged.append(name)
        else:
            raise DataError(f"binary tuple data in {table.schema}.{table.table}.{name}: the "
                            "ingest asks for text format only")
    return values, tuple(unchanged)


def records_of(message: Insert | Update | Delete | Truncate,
               relations: RelationCache) -> list[Record]:
    """A decoded data message as bronze records (a TRUNCATE: one per table).

    The reference for fastpath.decode_row_change, which must return the same record.
    """
    if isinstance(message, Truncate):
        return [truncate_record(relations.get(relation_id), message.cascade,
                                message.restart_identity)
                for relation_id in message.relation_ids]
    table = relations.get(message.relation_id)
    if isinstance(message, Insert):
        values, unchanged = text_values(message.new, table)
        return [change_record(OP_INSERT, table, values, unchanged)]
    if isinstance(message, Update):
        values, unchanged = text_values(message.new, table)
        old = text_values(message.old, table)[0] if message.old is not None else None
        return [change_record(OP_UPDATE, table, values, unchanged, message.old_kind, old)]
    old = text_values(message.old, table)[0]  # Delete: only the old key (or row) is sent
    return [change_record(OP_DELETE, table, (None,) * len(table.columns), (),
                          message.old_kind, old)]


@dataclass
class _OpenTransaction:
    commit_lsn: int
    xid: int
    commit_ts: int
    first_new: int  # changes below this index are in bronze already (a replay)


class ChangeAssembler:
    """Feeds pgoutput messages into the bronze writer with positions assigned."""

    def __init__(self, writer: BronzeWriter, spill_rows: int, batch_rows: int = 50_000) -> None:
        self.writer = writer
        self.spill_rows = spill_rows
        self.batch_rows = batch_rows  # a streamed transaction lands in commits of this size
        self.relations = RelationCache()
        self._tables = self.relations.by_id  # relation id -> TableInfo, for the fast path
        self.in_stream = False  # inside Stream Start/Stop: data messages carry an xid
        self._open: _OpenTransaction | None = None
        self._skip = 0  # changes of the open transaction still to skip: bronze has them
        self._append = writer.append
        self._streams: dict[int, StreamedTransaction] = {}
        self._stream: StreamedTransaction | None = None  # the one streaming now
        self.transactions = 0
        self._changes = 0  # of finished transactions
        self.last_commit_ts = 0  # Unix micros of the newest commit seen
        self._handlers = {
            Begin: self._begin, Commit: self._commit, Relation: self._relation,
            Type: self.relations.add_type, Origin: self._origin,
            Insert: self._change, Update: self._change, Delete: self._change,
            Truncate: self._change, LogicalMessage: self._message,
            StreamStart: self._stream_start, StreamStop: self._stream_stop,
            StreamCommit: self._stream_commit, StreamAbort: self._stream_abort,
        }

    @property
    def idle(self) -> bool:
        """No transaction open or streaming: everything received has been handed over."""
        return self._open is None and not self._streams

    @property
    def changes(self) -> int:
        """Changes handed to bronze by this run (not replays of changes bronze has)."""
        txn = self._open
        return self._changes + (self.writer.next_index - txn.first_new if txn else 0)

    def feed_bytes(self, buf: bytes, pos: int) -> None:
        """Process the pgoutput message at buf[pos:] (the rest of buf).

        The hot path of the ingest: data messages inside a transaction, Begin and Commit
        go through the fast decoder; the rest, and whatever it declines, through
        decode_message.
        """
        try:
            kind = buf[pos]
        except IndexError:  # an empty message: decode_message says so
            kind = None
        if kind in ROW_MESSAGE_TYPES and (self.in_stream or self._open is not None):
            decoded = decode_row_change(buf, pos, self.in_stream, self._tables)
            if decoded is not None:
                if self.in_stream:
                    self._stream.add(decoded)
                elif self._skip:  # _land, inlined: one call less per change
                    self._skip -= 1
                else:
                    self._append(decoded[1])
                return
        elif kind == BEGIN:
            begin = decode_begin(buf, pos)
            if begin is not None:
                return self._begin_transaction(*begin)
        elif kind == COMMIT:
            commit = decode_commit(buf, pos)
            if commit is not None:
                return self._end_transaction(*commit)
        self.feed(decode_message(buf[pos:], in_stream=self.in_stream))

    def feed(self, message: PgOutputMessage) -> None:
        """Process one decoded message (the reference path)."""
        self._handlers[type(message)](message)

    def reset(self) -> None:
        """Forget partial transactions (the server resends them after a reconnect)."""
        for stream in self._streams.values():
            stream.close()
        self._streams.clear()
        self._open = None
        self._skip = 0
        self._stream = None
        self.in_stream = False
        self.writer.discard_incomplete()

    # -- changes ----------------------------------------------------------------------

    def _change(self, message: Insert | Update | Delete | Truncate) -> None:
        """A data message from the reference decoder."""
        if not self.in_stream:
            self._require_open(message)
        for record in records_of(message, self.relations):
            if self.in_stream:
                self._stream.add((message.xid, record))
            else:
                self._land(record)

    def _land(self, record: Record) -> None:
        """Hand one record of the open plain transaction to the writer (unless a replay)."""
        if self._skip:
            self._skip -= 1
        else:
            self._append(record)

    # -- plain transactions -----------------------------------------------------------

    def _begin(self, message: Begin) -> None:
        self._begin_transaction(message.final_lsn, message.xid, unix_micros(message.commit_ts))

    def _begin_transaction(self, commit_lsn: int, xid: int, commit_ts: int) -> None:
        if self._open is not None:
            raise DataError(f"Begin of xid {xid} inside open xid {self._open.xid}")
        txn = _OpenTransaction(commit_lsn, xid, commit_ts,
                               self.writer.first_new_index(commit_lsn))
        self._open, self._skip = txn, txn.first_new
        self.writer.begin(commit_lsn, txn.first_new, xid, commit_ts)

    def _commit(self, message: Commit) -> None:
        self._end_transaction(message.commit_lsn, message.end_lsn)

    def _end_transaction(self, commit_lsn: int, end_lsn: int) -> None:
        txn = self._open
        if txn is None or txn.commit_lsn != commit_lsn:
            raise DataError(f"Commit at {commit_lsn:X} does not match the open transaction")
        self._changes = self.changes
        self._open = None
        self.transactions += 1
        self.last_commit_ts = txn.commit_ts
        self.writer.end_unit(end_lsn, commit_lsn)

    def _relation(self, message: Relation) -> None:
        self.relations.add_relation(message)

    def _origin(self, message: Origin) -> None:
        log.debug("origin %s (replicated from elsewhere): recorded as ordinary changes",
                  message.name)

    def _message(self, message: LogicalMessage) -> None:
        record = message_record(message.prefix, message.content, message.transactional)
        if not message.transactional:  # sent at once, outside any transaction
            if self._open is not None:  # the server decodes these between transactions
                raise DataError(f"non-transactional message inside open xid {self._open.xid}")
            if not self.writer.landed(message.lsn, 0):
                self.writer.begin(message.lsn, 0, None, None)
                self._append(record)
                self._changes += 1
            self.writer.end_unit(None)
        elif self.in_stream:
            self._stream.add((message.xid, record))
        else:
            self._require_open(message)
            self._land(record)

    def _require_open(self, message: PgOutputMessage) -> _OpenTransaction:
        if self._open is None:
            raise DataError(f"{type(message).__name__} outside a transaction")
        return self._open

    # -- streamed transactions (protocol v2) ------------------------------------------

    def _stream_start(self, message: StreamStart) -> None:
        self.in_stream = True
        if message.xid not in self._streams:
            self._streams[message.xid] = StreamedTransaction(message.xid, self.spill_rows,
                                                             self.writer)
        self._stream = self._streams[message.xid]

    def _stream_stop(self, message: StreamStop) -> None:
        self.in_stream = False
        self._stream = None

    def _stream_commit(self, message: StreamCommit) -> None:
        """Land a streamed transaction: its spilled blocks, then its last records."""
        stream = self._streams.pop(message.xid, None)
        if stream is None:
            raise DataError(f"Stream Commit of unknown xid {message.xid}")
        lsn, xid, ts = message.commit_lsn, message.xid, unix_micros(message.commit_ts)
        first_new = self.writer.first_new_index(lsn)  # a replay skips what bronze holds
        if (stream.spilled_rows and first_new == 0 and not stream.aborted_subxids
                and self.writer.files_patchable):
            self._land_files(stream, lsn, ts, message.end_lsn)
            return
        if first_new == ALL_LANDED:  # replayed whole: its files need not be read back
            stream.close()
            self._count_transaction(ts, 0)
            self.writer.end_unit(message.end_lsn, lsn)
            return
        try:
            tail = stream.unspilled()
            index = self._land_spilled(stream, lsn, xid, ts, first_new,
                                       ends_transaction=not tail, end_lsn=message.end_lsn)
            self.writer.begin(lsn, max(first_new, index), xid, ts)
            for record in islice(tail, max(first_new - index, 0), None):
                self._append(record)
                if self.writer.buffered_rows >= self.batch_rows:
                    self.writer.land(complete_only=False)  # bounded memory for huge txns
            index += len(tail)
        finally:
            stream.close()
        self._count_transaction(ts, max(index - first_new, 0))
        self.writer.end_unit(message.end_lsn, lsn)

    def _count_transaction(self, commit_ts: int, changes: int) -> None:
        self._changes += changes
        self.transactions += 1
        self.last_commit_ts = commit_ts

    def _land_files(self, stream: StreamedTransaction, lsn: int, ts: int,
                    end_lsn: int) -> None:
        """Land a streamed transaction in one commit of the files its blocks were encoded
        to as they arrived, plus one for its last records: positions as written."""
        committed, last = False, None
        try:
            files = stream.files()
            tail = stream.unspilled()
            if tail:
                last = self.writer.encode_pending(
                    pa.Table.from_batches([record_batch(tail)]), stream.spilled_rows,
                    stream.xid).result()
            self.writer.land_files(files + ([last] if last else []), lsn, ts, end_lsn)
            committed = True
        finally:
            stream.close(committed)
            if last is not None and not committed:
                last.discard()
        self._count_transaction(ts, stream.spilled_rows + len(tail))

    def _land_spilled(self, stream: StreamedTransaction, lsn: int, xid: int, ts: int,
                      first_new: int, ends_transaction: bool, end_lsn: int) -> int:
        """Land the spilled changes from index `first_new` on, in commits of about
        batch_rows; returns how many changes were spilled (the tail's first index)."""
        index = 0  # change index of the next spilled change
        pending: list[pa.RecordBatch] = []  # changes from index `start` on, to land
        pending_rows, start = 0, first_new
        for block in stream.spilled():
            skip = max(first_new - index, 0)
            if skip < block.num_rows:
                if pending_rows >= self.batch_rows:  # land before adding: the last lands below
                    self.writer.land_arrow(pending, lsn, start, xid, ts)
                    pending, pending_rows, start = [], 0, index
                pending.append(block.slice(skip))
                pending_rows += block.num_rows - skip
            index += block.num_rows
        if pending:
            self.writer.land_arrow(pending, lsn, start, xid, ts,
                                   end_lsn if ends_transaction else None)
        return index

    def _stream_abort(self, message: StreamAbort) -> None:
        stream = self._streams.get(message.xid)
        if stream is None:
            return  # aborted before any change of it was streamed to us
        if message.subxid == message.xid:
            stream.close()
            del self._streams[message.xid]
        else:
            stream.aborted_subxids.add(message.subxid)
