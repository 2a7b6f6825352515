"""Slot generations: which slot, on which server and timeline, bronze's positions came from.

A lost slot, or a failover to a server that lacks changes bronze holds, starts a new
generation (`lakehouse recover`). The lake's positions stay one totally ordered space,
(generation, commit_lsn, change_index), without a third column in bronze, silver,
tombstones or progress: a generation's lake LSN is the source's LSN plus an offset fixed
when the generation starts, so that every position it lands sorts after every position
already in bronze, whatever the new server's own LSNs are. The first generation's offset
is 0: a lake that never recovered holds the source's own LSNs, and a lake made before
generations existed reads as generation 0 with no migration.

The registry is a small Delta table, `_state/slot_generations`, appended to only:
one row when a generation starts, and one more each time a promotion keeps the slot's
lineage (the same generation on a new timeline). The last row is the current one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import pyarrow as pa

from pipelines.lake import Lake
from pipelines.state_table import TIMESTAMP, StateTable

SCHEMA = pa.schema([
    pa.field("generation", pa.int64(), nullable=False),
    pa.field("slot", pa.string(), nullable=False),
    pa.field("system_identifier", pa.string()),  # IDENTIFY_SYSTEM's systemid
    pa.field("timeline", pa.int64()),
    pa.field("lake_start_lsn", pa.int64(), nullable=False),  # its positions are >= this
    pa.field("lsn_offset", pa.int64(), nullable=False),  # lake LSN = source LSN + offset
    pa.field("resync_tables", pa.list_(pa.string())),  # scheduled when it started
    pa.field("recorded_at", TIMESTAMP, nullable=False),
    pa.field("reason", pa.string()),
])


@dataclass(frozen=True)
class Generation:
    """One slot generation on one timeline, as recorded."""

    generation: int
    slot: str
    system_identifier: str | None
    timeline: int | None
    lake_start_lsn: int
    lsn_offset: int
    resync_tables: tuple[str, ...] = ()
    recorded_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    reason: str | None = None

    def to_lake(self, source_lsn: int) -> int:
        return source_lsn + self.lsn_offset

    def to_source(self, lake_lsn: int) -> int:
        """The source LSN of a lake LSN of this generation (0 for an older position)."""
        return max(0, lake_lsn - self.lsn_offset) if lake_lsn >= self.lake_start_lsn else 0


def first_generation(slot: str) -> Generation:
    """What a lake with no registry holds: generation 0, the source's own LSNs."""
    return Generation(0, slot, None, None, 0, 0, reason="first")


def next_generation(current: Generation, slot: str, system_identifier: str, timeline: int,
                    source_start_lsn: int, bronze_end_lsn: int,
                    resync_tables: tuple[str, ...], reason: str) -> Generation:
    """A new generation whose positions, from `source_start_lsn` on, all sort after
    `bronze_end_lsn` (the newest lake LSN bronze holds)."""
    offset = max(0, bronze_end_lsn + 1 - source_start_lsn)
    return Generation(current.generation + 1, slot, system_identifier, timeline,
                      source_start_lsn + offset, offset, tuple(resync_tables), reason=reason)


class Registry:
    """The lake's slot generations (`_state/slot_generations`)."""

    def __init__(self, lake: Lake) -> None:
        self.table = StateTable(lake.slot_generations, SCHEMA)

    def all(self) -> list[Generation]:
        """Every recorded row, oldest first; empty for a lake that never recorded one."""
        return sorted(self.table.records(Generation),
                      key=lambda g: (g.generation, g.recorded_at))

    def current(self, slot: str) -> Generation:
        """The newest row, or generation 0 if none was recorded."""
        rows = self.all()
        return rows[-1] if rows else first_generation(slot)

    def record(self, generation: Generation) -> Generation:
        """Append a row (the new current one)."""
        recorded = replace(generation, recorded_at=datetime.now(timezone.utc))
        self.table.append([recorded])
        return recorded


def generation_starts(generations: list[Generation]) -> list[int]:
    """The lake LSN each generation starts at, ascending (generation 0 at 0)."""
    return sorted({0, *(g.lake_start_lsn for g in generations)})
