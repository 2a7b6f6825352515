"""Backfill progress in the lake: one row per backfill in the Delta table _state/backfills.

A row is replaced (an upsert by backfill id, pipelines.state_table) as chunks land, so
the table holds the current state of every backfill ever run and a crash resumes from
the last persisted cursor. Chunk ids are handed out in reserved blocks
(`chunk_ids_reserved`): a run never uses an id it has not persisted as reserved, and a
resumed run starts past the reservation, so an id used by a crashed run (its low
watermark may be in the WAL) is never used again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone

import pyarrow as pa

from pipelines.lake import Where
from pipelines.state_table import TIMESTAMP, StateTable

RUNNING, DONE, FAILED = "running", "done", "failed"

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
    pa.field("started_at", TIMESTAMP, nullable=False),
    pa.field("updated_at", TIMESTAMP, nullable=False),
    pa.field("finished_at", TIMESTAMP),
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
        self.table = StateTable(where, STATE_SCHEMA, key="backfill_id")

    def all(self) -> list[BackfillState]:
        """Every backfill, oldest first; empty if no backfill ever ran."""
        states = self.table.records(BackfillState)
        return sorted(states, key=lambda s: (s.started_at, s.backfill_id))

    def latest_per_table(self) -> dict[str, BackfillState]:
        """The most recently started backfill of each table."""
        return {state.table_name: state for state in self.all()}

    def save(self, state: BackfillState) -> BackfillState:
        """Replace the backfill's row (retrying commit races with other processes)."""
        state = replace(state, updated_at=datetime.now(timezone.utc))
        self.table.upsert([state])
        return state

    def ensure(self) -> None:
        """Create the table if it does not exist yet (first backfill)."""
        self.table.create()


def pending_resyncs(states: list[BackfillState], generation: int,
                    tables: tuple[str, ...]) -> list[str]:
    """Of the resyncs `lakehouse recover` scheduled for `generation` (`tables`), the
    ones not finished yet."""
    done = {s.table_name for s in states
            if s.resync and s.generation == generation and s.status == DONE}
    return [t for t in tables if t not in done]
