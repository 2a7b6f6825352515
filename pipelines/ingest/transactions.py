"""Transaction assembly: decoded pgoutput messages -> bronze rows with positions.

A row's position is (commit LSN of its transaction, 0-based index of the row in it).
Plain transactions know their commit LSN at Begin (final_lsn), so their rows go straight
to the writer. Streamed transactions (protocol v2) arrive in pieces, interleaved, before
their commit LSN is known: they are buffered per transaction and spilled to a temp file
past `spill_rows`, so memory stays bounded whatever the transaction size. An aborted
stream (or subtransaction) is discarded; a committed one lands with its final positions.
"""

from __future__ import annotations

import logging
import pickle
import tempfile
from dataclasses import dataclass, field
from typing import IO, Iterator

from pipelines.bronze.schema import OP_DELETE, OP_INSERT, OP_UPDATE
from pipelines.errors import DataError
from pipelines.ingest.bronze_writer import BronzeWriter
from pipelines.ingest.pgoutput import (
    NULL, Begin, Commit, Delete, Insert, LogicalMessage, Origin, PgOutputMessage, Relation,
    StreamAbort, StreamCommit, StreamStart, StreamStop, Truncate, TupleData, Type, Update,
    UNCHANGED_TOAST, timestamp_to_pg)
from pipelines.ingest.relations import RelationCache, TableInfo

log = logging.getLogger(__name__)

_PG_TO_UNIX_MICROS = 946_684_800_000_000  # 2000-01-01 minus 1970-01-01


def unix_micros(moment) -> int:
    return timestamp_to_pg(moment) + _PG_TO_UNIX_MICROS


def text_values(row: TupleData, table: TableInfo) -> tuple[TupleData | list[str | None], tuple[str, ...]]:
    """Tuple data as text values (None for NULL and unchanged TOAST) + unchanged columns."""
    if len(row) != len(table.columns):
        raise DataError(f"{table.schema}.{table.table}: tuple has {len(row)} columns, its "
                        f"Relation message {len(table.columns)}")
    if NULL not in row and UNCHANGED_TOAST not in row:  # the common case: all text
        return row, ()
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


@dataclass
class _OpenTransaction:
    commit_lsn: int
    xid: int
    commit_ts: int
    next_index: int = 0


@dataclass
class _StreamedTransaction:
    """Changes of one streamed transaction, in arrival (WAL) order, partly on disk."""

    spill_rows: int
    tables: list[TableInfo] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)  # (subxid, table index, message)
    aborted_subxids: set[int] = field(default_factory=set)
    spill: IO[bytes] | None = None
    spilled_rows: int = 0

    def add(self, subxid: int, table: TableInfo | None, message: PgOutputMessage) -> None:
        index = -1
        if table is not None:
            if not self.tables or self.tables[-1] is not table:
                self.tables.append(table)
            index = len(self.tables) - 1
        self.rows.append((subxid, index, message))
        if len(self.rows) >= self.spill_rows:
            if self.spill is None:
                self.spill = tempfile.TemporaryFile(prefix="lakehouse-stream-")
            pickle.dump(self.rows, self.spill, protocol=pickle.HIGHEST_PROTOCOL)
            self.spilled_rows += len(self.rows)
            self.rows = []

    def replay(self) -> Iterator[tuple[TableInfo | None, PgOutputMessage]]:
        """Committed changes in order, without those of aborted subtransactions."""
        if self.spill is not None:
            self.spill.seek(0)
            while self.spill.tell() < self.spill_end():
                yield from self._visible(pickle.load(self.spill))
        yield from self._visible(self.rows)

    def spill_end(self) -> int:
        position = self.spill.tell()
        end = self.spill.seek(0, 2)
        self.spill.seek(position)
        return end

    def _visible(self, rows: list[tuple]) -> Iterator[tuple[TableInfo | None, PgOutputMessage]]:
        for subxid, index, message in rows:
            if subxid not in self.aborted_subxids:
                yield (self.tables[index] if index >= 0 else None), message

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()


class ChangeAssembler:
    """Feeds decoded messages into the bronze writer with positions assigned."""

    def __init__(self, writer: BronzeWriter, spill_rows: int) -> None:
        self.writer = writer
        self.spill_rows = spill_rows
        self.relations = RelationCache()
        self.in_stream = False  # inside Stream Start/Stop: data messages carry an xid
        self._open: _OpenTransaction | None = None
        self._streams: dict[int, _StreamedTransaction] = {}
        self._stream_xid: int | None = None
        self.transactions = 0
        self.changes = 0
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

    def feed(self, message: PgOutputMessage) -> None:
        self._handlers[type(message)](message)

    def reset(self) -> None:
        """Forget partial transactions (the server resends them after a reconnect)."""
        for stream in self._streams.values():
            stream.close()
        self._streams.clear()
        self._open = None
        self._stream_xid = None
        self.in_stream = False
        self.writer.discard_incomplete()

    # -- plain transactions -----------------------------------------------------------

    def _begin(self, message: Begin) -> None:
        if self._open is not None:
            raise DataError(f"Begin of xid {message.xid} inside open xid {self._open.xid}")
        self._open = _OpenTransaction(message.final_lsn, message.xid,
                                      unix_micros(message.commit_ts))

    def _commit(self, message: Commit) -> None:
        txn = self._open
        if txn is None or txn.commit_lsn != message.commit_lsn:
            raise DataError(f"Commit at {message.commit_lsn:X} does not match the open "
                            "transaction")
        self._open = None
        self.transactions += 1
        self.last_commit_ts = txn.commit_ts
        self.writer.end_unit(message.end_lsn)

    def _relation(self, message: Relation) -> None:
        self.relations.add_relation(message)

    def _origin(self, message: Origin) -> None:
        log.debug("origin %s (replicated from elsewhere): recorded as ordinary changes",
                  message.name)

    def _change(self, message: PgOutputMessage) -> None:
        if self.in_stream:
            self._stream_add(message)
            return
        txn = self._require_open(message)
        table = None if isinstance(message, Truncate) else self.relations.get(message.relation_id)
        txn.next_index = self._land(txn.commit_lsn, txn.next_index, txn.xid, txn.commit_ts,
                                    table, message)

    def _message(self, message: LogicalMessage) -> None:
        if not message.transactional:  # sent at once, outside any transaction
            self._land(message.lsn, 0, None, None, None, message)
            self.writer.end_unit(None)
            return
        if self.in_stream:
            self._stream_add(message)
            return
        txn = self._require_open(message)
        txn.next_index = self._land(txn.commit_lsn, txn.next_index, txn.xid, txn.commit_ts,
                                    None, message)

    def _require_open(self, message: PgOutputMessage) -> _OpenTransaction:
        if self._open is None:
            raise DataError(f"{type(message).__name__} outside a transaction")
        return self._open

    def _land(self, commit_lsn: int, index: int, xid: int | None, commit_ts: int | None,
              table: TableInfo | None, message: PgOutputMessage) -> int:
        """Hand one message's rows to the writer at `index`; returns the next index."""
        writer = self.writer
        if isinstance(message, Truncate):
            for relation_id in message.relation_ids:
                if not writer.landed(commit_lsn, index):
                    writer.add_truncate(commit_lsn, index, xid, commit_ts,
                                        self.relations.get(relation_id), message.cascade,
                                        message.restart_identity)
                index += 1
            self.changes += len(message.relation_ids)
            return index
        self.changes += 1
        if writer.landed(commit_lsn, index):
            return index + 1
        if isinstance(message, LogicalMessage):
            writer.add_message(commit_lsn, index, xid, commit_ts, message.prefix,
                               message.content, message.transactional)
        elif isinstance(message, Insert):
            values, unchanged = text_values(message.new, table)
            writer.add_change(commit_lsn, index, xid, commit_ts, OP_INSERT, table, values,
                              unchanged)
        elif isinstance(message, Update):
            values, unchanged = text_values(message.new, table)
            old = text_values(message.old, table)[0] if message.old is not None else None
            writer.add_change(commit_lsn, index, xid, commit_ts, OP_UPDATE, table, values,
                              unchanged, message.old_kind, old)
        else:  # Delete: only the old key (or old row) is sent
            old = text_values(message.old, table)[0]
            writer.add_change(commit_lsn, index, xid, commit_ts, OP_DELETE, table,
                              [None] * len(table.columns), [], message.old_kind, old)
        return index + 1

    # -- streamed transactions (protocol v2) ------------------------------------------

    def _stream_start(self, message: StreamStart) -> None:
        self.in_stream = True
        self._stream_xid = message.xid
        if message.xid not in self._streams:
            self._streams[message.xid] = _StreamedTransaction(self.spill_rows)

    def _stream_stop(self, message: StreamStop) -> None:
        self.in_stream = False
        self._stream_xid = None

    def _stream_add(self, message: PgOutputMessage) -> None:
        stream = self._streams[self._stream_xid]
        table = None
        if isinstance(message, (Insert, Update, Delete)):
            table = self.relations.get(message.relation_id)
        stream.add(message.xid, table, message)

    def _stream_commit(self, message: StreamCommit) -> None:
        stream = self._streams.pop(message.xid, None)
        if stream is None:
            raise DataError(f"Stream Commit of unknown xid {message.xid}")
        ts = unix_micros(message.commit_ts)
        index = 0
        try:
            for table, change in stream.replay():
                index = self._land(message.commit_lsn, index, message.xid, ts, table, change)
                if self.writer.buffered_rows >= self.spill_rows:
                    self.writer.flush(complete_only=False)  # bounded memory for huge txns
        finally:
            stream.close()
        self.transactions += 1
        self.last_commit_ts = ts
        self.writer.end_unit(message.end_lsn)

    def _stream_abort(self, message: StreamAbort) -> None:
        stream = self._streams.get(message.xid)
        if stream is None:
            return  # aborted before any change of it was streamed to us
        if message.subxid == message.xid:
            stream.close()
            del self._streams[message.xid]
        else:
            stream.aborted_subxids.add(message.subxid)
