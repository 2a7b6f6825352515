"""Bronze landing: buffer change rows and append them to Delta with delta-rs.

Each commit records the slot's progress in the same atomic Delta commit: the end LSN of
the last whole transaction landed (Delta app transaction, app id = slot name) and the
last landed position (commit metadata). After any crash the ingest reads both back and
skips exactly what bronze already holds, so no position lands twice or goes missing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from pipelines.bronze.schema import CHANGES_SCHEMA, OP_MESSAGE, OP_TRUNCATE
from pipelines.ingest.relations import TableInfo

log = logging.getLogger(__name__)

POSITION_KEY = "lakehouse.position"
Position = tuple[int, int]  # (commit_lsn, change_index)
NO_POSITION: Position = (0, -1)


@dataclass(frozen=True)
class Progress:
    """What bronze durably holds: confirmable end LSN and the last landed position."""

    end_lsn: int = 0
    position: Position = NO_POSITION


def read_progress(path: Path, app_id: str) -> Progress:
    """Progress recorded by the last ingest commit; creates an empty table if missing."""
    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        DeltaTable.create(str(path), schema=CHANGES_SCHEMA, mode="ignore",
                          name="bronze_changes",
                          description="raw Postgres change log (pgoutput), one row per change")
        return Progress()
    end_lsn = table.transaction_version(app_id) or 0
    for commit in table.history(limit=50):  # newest first; maintenance commits lack the key
        if POSITION_KEY in commit:
            lsn, index = commit[POSITION_KEY].split(":")
            return Progress(end_lsn, (int(lsn), int(index)))
    return Progress(end_lsn)


class BronzeWriter:
    """Buffer of bronze rows in position order, flushed as Delta commits.

    A row is one tuple in CHANGES_SCHEMA order (table metadata by index); the flush
    transposes the buffer with zip and lets Arrow convert whole columns, which keeps the
    per-change cost of the hot path to a single append.
    """

    def __init__(self, path: Path, app_id: str) -> None:
        self.path = path
        self.app_id = app_id
        self.progress = read_progress(path, app_id)
        self._tables: list[TableInfo] = []
        self._table_index: dict[int, int] = {}  # id(TableInfo) -> index; _tables keeps them alive
        self._rows: list[tuple] = []
        self._boundaries: list[tuple[int, int]] = []  # (rows after a whole txn, its end LSN)
        self._first_row_at = 0.0

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

    def landed(self, commit_lsn: int, index: int) -> bool:
        """True if bronze already holds this position (a replay after a restart)."""
        last_lsn, last_index = self.progress.position
        return commit_lsn < last_lsn or (commit_lsn == last_lsn and index <= last_index)

    def add_change(self, commit_lsn: int, index: int, xid: int, commit_ts: int, op: str,
                   table: TableInfo, values: Sequence[str | None], unchanged: Sequence[str],
                   old_kind: str | None = None,
                   old_values: Sequence[str | None] | None = None) -> None:
        """Buffer an insert, update or delete. commit_ts is in Unix microseconds."""
        if not self._rows:
            self._first_row_at = time.monotonic()
        self._rows.append((commit_lsn, index, xid, commit_ts, op, self._table_id(table),
                           values, unchanged, old_kind, old_values,
                           None, None, None, None, None))

    def add_truncate(self, commit_lsn: int, index: int, xid: int, commit_ts: int,
                     table: TableInfo, cascade: bool, restart_identity: bool) -> None:
        if not self._rows:
            self._first_row_at = time.monotonic()
        self._rows.append((commit_lsn, index, xid, commit_ts, OP_TRUNCATE,
                           self._table_id(table), None, (), None, None,
                           cascade, restart_identity, None, None, None))

    def add_message(self, commit_lsn: int, index: int, xid: int | None, commit_ts: int | None,
                    prefix: str, content: bytes, transactional: bool) -> None:
        if not self._rows:
            self._first_row_at = time.monotonic()
        self._rows.append((commit_lsn, index, xid, commit_ts, OP_MESSAGE, None, None, (),
                           None, None, None, None, prefix, content, transactional))

    def end_unit(self, end_lsn: int | None) -> None:
        """Everything buffered so far forms whole transactions; end_lsn is the last one's end."""
        end = end_lsn if end_lsn is not None else (
            self._boundaries[-1][1] if self._boundaries else self.progress.end_lsn)
        self._boundaries.append((len(self._rows), end))

    def discard_incomplete(self) -> None:
        """Drop rows of a transaction that will be resent (after a lost connection)."""
        del self._rows[self.complete_rows:]

    def flush(self, complete_only: bool) -> Progress:
        """Append buffered rows (only whole transactions if complete_only) in one commit."""
        count = self.complete_rows if complete_only else len(self._rows)
        if count == 0:
            return self.progress
        end_lsn = self.progress.end_lsn
        for rows, end in self._boundaries:
            if rows <= count:
                end_lsn = end
        position = self._rows[count - 1][:2]
        write_deltalake(
            str(self.path), self._arrow(self._rows[:count]), mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=self.app_id, version=end_lsn)],
                custom_metadata={POSITION_KEY: f"{position[0]}:{position[1]}"}))
        self.progress = Progress(end_lsn, position)
        del self._rows[:count]
        self._boundaries = [(rows - count, end) for rows, end in self._boundaries if rows > count]
        self._first_row_at = time.monotonic()
        return self.progress

    def _table_id(self, table: TableInfo) -> int:
        found = self._table_index.get(id(table))  # identity: hashing the tuples is slow
        if found is None:
            found = self._table_index[id(table)] = len(self._tables)
            self._tables.append(table)
        return found

    def _arrow(self, rows: list[tuple]) -> pa.Table:
        """Rows as a table of CHANGES_SCHEMA: one transpose, then whole-column conversion."""
        (lsn, index, xid, ts, op, table_ids, values, unchanged, old_kind, old_values,
         cascade, restart, prefix, content, transactional) = zip(*rows)
        ids = pa.array(table_ids, pa.int32())
        tables = self._tables
        text_list = pa.list_(pa.string())
        utc = CHANGES_SCHEMA.field("commit_ts").type

        def per_table(attribute: str, type_: pa.DataType) -> pa.Array:
            return pa.array([getattr(t, attribute) for t in tables], type_).take(ids)

        now = int(datetime.now(timezone.utc).timestamp() * 1_000_000)
        columns = {
            "commit_lsn": pa.array(lsn, pa.int64()),
            "change_index": pa.array(index, pa.int64()),
            "xid": pa.array(xid, pa.int64()),
            "commit_ts": pa.array(ts, pa.int64()).cast(utc),
            "op": pa.array(op, pa.string()),
            "schema_name": per_table("schema", pa.string()),
            "table_name": per_table("table", pa.string()),
            "columns": per_table("columns", text_list),
            "type_names": per_table("type_names", text_list),
            "type_oids": per_table("type_oids", pa.list_(pa.int64())),
            "type_mods": per_table("type_mods", pa.list_(pa.int32())),
            "key_columns": per_table("key_columns", text_list),
            "values": pa.array(values, text_list),
            "unchanged_toast": pa.array(unchanged, text_list),
            "old_kind": pa.array(old_kind, pa.string()),
            "old_values": pa.array(old_values, text_list),
            "truncate_cascade": pa.array(cascade, pa.bool_()),
            "truncate_restart_identity": pa.array(restart, pa.bool_()),
            "message_prefix": pa.array(prefix, pa.string()),
            "message_content": pa.array(content, pa.binary()),
            "message_transactional": pa.array(transactional, pa.bool_()),
            "ingested_at": pa.array([now] * len(rows), pa.int64()).cast(utc),
        }
        return pa.Table.from_pydict(columns, schema=CHANGES_SCHEMA)
