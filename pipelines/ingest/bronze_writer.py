"""Bronze landing: buffer change rows column-wise and append them to Delta with delta-rs.

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
    """Column-wise buffer of bronze rows in position order, flushed as Delta commits."""

    def __init__(self, path: Path, app_id: str) -> None:
        self.path = path
        self.app_id = app_id
        self.progress = read_progress(path, app_id)
        self._tables: list[TableInfo] = []
        self._table_index: dict[TableInfo, int] = {}
        self._boundaries: list[tuple[int, int]] = []  # (rows after a whole txn, its end LSN)
        self._reset_buffer()

    @property
    def buffered_rows(self) -> int:
        return len(self._lsn)

    @property
    def complete_rows(self) -> int:
        """Rows of whole transactions (and non-transactional messages) in the buffer."""
        return self._boundaries[-1][0] if self._boundaries else 0

    @property
    def oldest_row_age(self) -> float:
        return time.monotonic() - self._first_row_at if self._lsn else 0.0

    def landed(self, commit_lsn: int, index: int) -> bool:
        """True if bronze already holds this position (a replay after a restart)."""
        last_lsn, last_index = self.progress.position
        return commit_lsn < last_lsn or (commit_lsn == last_lsn and index <= last_index)

    def add_change(self, commit_lsn: int, index: int, xid: int, commit_ts: int, op: str,
                   table: TableInfo, values: Sequence[str | None], unchanged: Sequence[str],
                   old_kind: str | None = None,
                   old_values: Sequence[str | None] | None = None) -> None:
        """Buffer an insert, update or delete. commit_ts is in Unix microseconds."""
        self._add_row(commit_lsn, index, xid, commit_ts, op, self._table_id(table))
        self._values.extend(values)
        self._values_end.append(len(self._values))
        self._toast.extend(unchanged)
        self._toast_end.append(len(self._toast))
        self._old_kind.append(old_kind)
        if old_values is not None:
            self._old_values.extend(old_values)
        self._old_present.append(old_values is not None)
        self._old_end.append(len(self._old_values))

    def add_truncate(self, commit_lsn: int, index: int, xid: int, commit_ts: int,
                     table: TableInfo, cascade: bool, restart_identity: bool) -> None:
        self._add_row(commit_lsn, index, xid, commit_ts, OP_TRUNCATE, self._table_id(table))
        self._no_tuples()
        self._extra[len(self._lsn) - 1] = (cascade, restart_identity, None, None, None)

    def add_message(self, commit_lsn: int, index: int, xid: int | None, commit_ts: int | None,
                    prefix: str, content: bytes, transactional: bool) -> None:
        self._add_row(commit_lsn, index, xid, commit_ts, OP_MESSAGE, -1)
        self._no_tuples()
        self._extra[len(self._lsn) - 1] = (None, None, prefix, content, transactional)

    def end_unit(self, end_lsn: int | None) -> None:
        """Everything buffered so far forms whole transactions; end_lsn is the last one's end."""
        end = end_lsn if end_lsn is not None else (
            self._boundaries[-1][1] if self._boundaries else self.progress.end_lsn)
        self._boundaries.append((len(self._lsn), end))

    def discard_incomplete(self) -> None:
        """Drop rows of a transaction that will be resent (after a lost connection)."""
        keep = self.complete_rows
        if keep == len(self._lsn):
            return
        self._truncate_buffer(keep)

    def flush(self, complete_only: bool) -> Progress:
        """Append buffered rows (only whole transactions if complete_only) in one commit."""
        count = self.complete_rows if complete_only else len(self._lsn)
        if count == 0:
            return self.progress
        end_lsn = self.progress.end_lsn
        for rows, end in self._boundaries:
            if rows <= count:
                end_lsn = end
        batch = self._arrow(count)
        position = (self._lsn[count - 1], self._index[count - 1])
        write_deltalake(
            str(self.path), batch, mode="append",
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=self.app_id, version=end_lsn)],
                custom_metadata={POSITION_KEY: f"{position[0]}:{position[1]}"}))
        self.progress = Progress(end_lsn, position)
        self._drop_head(count)
        return self.progress

    # -- buffer internals -------------------------------------------------------------

    def _reset_buffer(self) -> None:
        self._lsn: list[int] = []
        self._index: list[int] = []
        self._xid: list[int | None] = []
        self._ts: list[int | None] = []
        self._op: list[str] = []
        self._table_ids: list[int] = []
        self._values: list[str | None] = []
        self._values_end: list[int] = []
        self._toast: list[str] = []
        self._toast_end: list[int] = []
        self._old_kind: list[str | None] = []
        self._old_values: list[str | None] = []
        self._old_present: list[bool] = []
        self._old_end: list[int] = []
        self._extra: dict[int, tuple] = {}  # row -> truncate flags / message fields
        self._first_row_at = 0.0

    def _table_id(self, table: TableInfo) -> int:
        found = self._table_index.get(table)
        if found is None:
            found = self._table_index[table] = len(self._tables)
            self._tables.append(table)
        return found

    def _add_row(self, commit_lsn: int, index: int, xid: int | None, ts: int | None,
                 op: str, table_id: int) -> None:
        if not self._lsn:
            self._first_row_at = time.monotonic()
        self._lsn.append(commit_lsn)
        self._index.append(index)
        self._xid.append(xid)
        self._ts.append(ts)
        self._op.append(op)
        self._table_ids.append(table_id)

    def _no_tuples(self) -> None:
        self._values_end.append(len(self._values))
        self._toast_end.append(len(self._toast))
        self._old_kind.append(None)
        self._old_present.append(False)
        self._old_end.append(len(self._old_values))

    def _arrow(self, count: int) -> pa.Table:
        """The first `count` buffered rows as a table of CHANGES_SCHEMA (vectorised)."""
        tables = self._tables
        ids = pa.array([t if t >= 0 else None for t in self._table_ids[:count]], pa.int32())

        def per_table(values, type_):
            return pa.array(values, type_).take(ids)

        def lists(flat, ends, type_, present=None):
            offsets = pa.array([0, *ends[:count]], pa.int32())
            mask = None if present is None else pa.array([not p for p in present[:count]])
            stop = ends[count - 1]
            return pa.ListArray.from_arrays(offsets, pa.array(flat[:stop], type_), mask=mask)

        extra = [self._extra.get(i, (None,) * 5) for i in range(count)]
        now = int(datetime.now(timezone.utc).timestamp() * 1_000_000)
        utc = CHANGES_SCHEMA.field("commit_ts").type
        text_list = pa.list_(pa.string())
        columns = {
            "commit_lsn": pa.array(self._lsn[:count], pa.int64()),
            "change_index": pa.array(self._index[:count], pa.int64()),
            "xid": pa.array(self._xid[:count], pa.int64()),
            "commit_ts": pa.array(self._ts[:count], pa.int64()).cast(utc),
            "op": pa.array(self._op[:count], pa.string()),
            "schema_name": per_table([t.schema for t in tables], pa.string()),
            "table_name": per_table([t.table for t in tables], pa.string()),
            "columns": per_table([t.columns for t in tables], text_list),
            "type_names": per_table([t.type_names for t in tables], text_list),
            "type_oids": per_table([t.type_oids for t in tables], pa.list_(pa.int64())),
            "type_mods": per_table([t.type_mods for t in tables], pa.list_(pa.int32())),
            "key_columns": per_table([t.key_columns for t in tables], text_list),
            "values": lists(self._values, self._values_end, pa.string(),
                            [op != OP_MESSAGE and op != OP_TRUNCATE for op in self._op]),
            "unchanged_toast": lists(self._toast, self._toast_end, pa.string()),
            "old_kind": pa.array(self._old_kind[:count], pa.string()),
            "old_values": lists(self._old_values, self._old_end, pa.string(),
                                self._old_present),
            "truncate_cascade": pa.array([e[0] for e in extra], pa.bool_()),
            "truncate_restart_identity": pa.array([e[1] for e in extra], pa.bool_()),
            "message_prefix": pa.array([e[2] for e in extra], pa.string()),
            "message_content": pa.array([e[3] for e in extra], pa.binary()),
            "message_transactional": pa.array([e[4] for e in extra], pa.bool_()),
            "ingested_at": pa.array([now] * count, pa.int64()).cast(utc),
        }
        return pa.Table.from_pydict(columns, schema=CHANGES_SCHEMA)

    def _drop_head(self, count: int) -> None:
        """Remove the first `count` rows (just landed) from the buffer."""
        if count == len(self._lsn):
            self._reset_buffer()
            self._boundaries = []
            return
        values_cut = self._values_end[count - 1]
        toast_cut = self._toast_end[count - 1]
        old_cut = self._old_end[count - 1]
        for name in ("_lsn", "_index", "_xid", "_ts", "_op", "_table_ids", "_old_kind",
                     "_old_present"):
            del getattr(self, name)[:count]
        del self._values[:values_cut]
        del self._toast[:toast_cut]
        del self._old_values[:old_cut]
        self._values_end = [e - values_cut for e in self._values_end[count:]]
        self._toast_end = [e - toast_cut for e in self._toast_end[count:]]
        self._old_end = [e - old_cut for e in self._old_end[count:]]
        self._extra = {i - count: v for i, v in self._extra.items() if i >= count}
        self._boundaries = [(rows - count, end) for rows, end in self._boundaries if rows > count]
        self._first_row_at = time.monotonic()

    def _truncate_buffer(self, keep: int) -> None:
        """Keep only the first `keep` rows."""
        if keep == 0:
            self._reset_buffer()
            self._boundaries = []
            return
        for name in ("_lsn", "_index", "_xid", "_ts", "_op", "_table_ids", "_old_kind",
                     "_old_present"):
            del getattr(self, name)[keep:]
        del self._values[self._values_end[keep - 1]:]
        del self._toast[self._toast_end[keep - 1]:]
        del self._old_values[self._old_end[keep - 1]:]
        del self._values_end[keep:]
        del self._toast_end[keep:]
        del self._old_end[keep:]
        self._extra = {i: v for i, v in self._extra.items() if i < keep}
