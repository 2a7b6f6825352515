"""Backfill progress in the lake: one row per backfill in the Delta table _state/backfills.

A row is replaced (delta-rs overwrite with a predicate on its backfill id) as chunks
land, so the table holds the current state of every backfill ever run and a crash
resumes from the last persisted cursor. Chunk ids are handed out in reserved blocks
(`chunk_ids_reserved`): a run never uses an id it has not persisted as reserved, and a
resumed run starts past the reservation, so an id used by a crashed run (its low
watermark may be in the WAL) is never used again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from pipelines.lake import (
    LOG_RETENTION, TableLocation, Where, location, read_delta, with_log_retention)

RUNNING, DONE, FAILED = "running", "done", "failed"
_UTC = pa.timestamp("us", tz="UTC")

STATE_SCHEMA = pa.schema([
    pa.field("backfill_id", pa.string(), nullable=False),
    pa.field("table_name", pa.string(), nullable=False),  # schema.table
    pa.field("status", pa.string(), nullable=False),  # running | done | failed
    pa.field("cursor_columns", pa.list_(pa.string())),  # the key, in keyset order
    pa.field("cursor", pa.list_(pa.string())),  # last key read (text); null: none yet
    pa.field("chunk_ids_reserved", pa.int64(), nullable=False),  # ids below may be used
    pa.field("chunks_done", pa.int64(), nullable=False),
    pa.field("rows_done", pa.int64(), nullable=False),
    pa.field("rows_estimate", pa.int64()),  # pg_class.reltuples when the backfill started
    pa.field("started_at", _UTC, nullable=False),
    pa.field("updated_at", _UTC, nullable=False),
    pa.field("finished_at", _UTC),
    pa.field("error", pa.string()),
    pa.field("resync", pa.bool_()),  # also deletes what the source no longer has
    pa.field("generation", pa.int64()),  # the slot generation it ran in (resyncs)
])


@dataclass(frozen=True)
class BackfillState:
    """One backfill of one table, as persisted."""

    backfill_id: str
    table_name: str
    status: str
    cursor_columns: tuple[str, ...] | None
    cursor: tuple[str, ...] | None
    chunk_ids_reserved: int
    chunks_done: int
    rows_done: int
    rows_estimate: int | None
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    error: str | None = None
    resync: bool = False
    generation: int | None = None

    @classmethod
    def new(cls, backfill_id: str, table: str, rows_estimate: int | None,
            resync: bool = False, generation: int | None = None) -> "BackfillState":
        now = datetime.now(timezone.utc)
        return cls(backfill_id, table, RUNNING, None, None, 0, 0, 0, rows_estimate, now, now,
                   resync=resync, generation=generation)

    @property
    def kind(self) -> str:
        return "resync" if self.resync else "backfill"

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("started_at", "updated_at", "finished_at"):
            out[key] = out[key].isoformat() if out[key] else None
        for key in ("cursor_columns", "cursor"):
            out[key] = list(out[key]) if out[key] is not None else None
        return out


class StateStore:
    """Reads and replaces backfill state rows; writes are serialized within the process."""

    def __init__(self, where: Where) -> None:
        self.location = location(where)
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None  # kept open: reloading the log costs more

    def all(self) -> list[BackfillState]:
        """Every backfill, oldest first; empty if no backfill ever ran."""
        try:
            table = read_delta(self.location)
        except TableNotFoundError:
            return []
        states = [_from_row(row) for row in table.to_pylist()]
        return sorted(states, key=lambda s: (s.started_at, s.backfill_id))

    def latest_per_table(self) -> dict[str, BackfillState]:
        """The most recently started backfill of each table."""
        return {state.table_name: state for state in self.all()}

    def save(self, state: BackfillState) -> BackfillState:
        """Replace the backfill's row (retrying commit races with other processes)."""
        state = replace(state, updated_at=datetime.now(timezone.utc))
        row = pa.Table.from_pylist([_to_row(state)], schema=STATE_SCHEMA)
        predicate = f"backfill_id = '{_literal(state.backfill_id)}'"
        with self._lock:
            if self._table is None:
                self._table = _open_or_create(self.location)
            for attempt in range(20):
                try:
                    # schema_mode merge: a state table made before a column existed gains it
                    write_deltalake(self._table, row, mode="overwrite", predicate=predicate,
                                    schema_mode="merge")
                    return state
                except CommitFailedError:
                    if attempt == 19:
                        raise
                    time.sleep(0.05 * (attempt + 1))
                    self._table.update_incremental()
        raise AssertionError("unreachable")

    def ensure(self) -> None:
        """Create the table if it does not exist yet (first backfill)."""
        with self._lock:
            if self._table is None:
                self._table = _open_or_create(self.location)


def _open_or_create(where: TableLocation) -> DeltaTable:
    try:
        return with_log_retention(where.open())
    except TableNotFoundError:
        return where.create(STATE_SCHEMA, configuration=LOG_RETENTION)


def _literal(value: str) -> str:
    return value.replace("'", "''")


def _to_row(state: BackfillState) -> dict:
    row = {f.name: getattr(state, f.name) for f in fields(state)}
    for key in ("cursor_columns", "cursor"):
        row[key] = list(row[key]) if row[key] is not None else None
    return row


def _from_row(row: dict) -> BackfillState:
    for key in ("cursor_columns", "cursor"):
        row[key] = tuple(row[key]) if row[key] is not None else None
    row["resync"] = bool(row.get("resync"))
    return BackfillState(**row)


def pending_resyncs(states: list[BackfillState], generation: int,
                    tables: tuple[str, ...]) -> list[str]:
    """Of the resyncs `lakehouse recover` scheduled for `generation` (`tables`), the
    ones not finished yet."""
    done = {s.table_name for s in states
            if s.resync and s.generation == generation and s.status == DONE}
    return [t for t in tables if t not in done]
