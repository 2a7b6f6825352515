"""DBLog watermarks: which backfill chunks can be applied, and their change windows.

The backfill emits a low and a high watermark (`pg_logical_emit_message`, prefix
WATERMARK_PREFIX) around each chunk's SELECT; they reach bronze/changes through the slot
like any change. A chunk is applicable once its high watermark is in bronze; a low
watermark without a high one never is. The high watermark may carry the SELECT's
snapshot (pg_current_snapshot(): 64-bit xmin, xmax, xip): a transaction that committed
just before the low watermark but was still running for that snapshot is not in the
chunk, so its changes count as window changes too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from pipelines.bronze.watermarks import HALF_RING, XID_MODULO, KeyRange, Snapshot
from pipelines.bronze.watermarks import parse_watermark as parse_body
from pipelines.errors import DataError
from pipelines.positions import Position


@dataclass(frozen=True)
class LandedWatermark:
    """One watermark message as it landed in bronze: its content plus its position."""

    backfill_id: str
    chunk_id: int
    table: str  # schema.table
    kind: str  # "low" | "high"
    position: Position
    commit_ts: datetime | None = None
    snapshot: Snapshot | None = None
    rows: int | None = None  # high: the chunk's rows (None: written before it was recorded)
    keys: KeyRange | None = None  # high: the keys the chunk read (None: not recorded)


@dataclass(frozen=True)
class ChunkWindow:
    """An applicable chunk: its rows become upserts at `high` unless changed in the window."""

    backfill_id: str
    chunk_id: int
    table: str
    low: Position
    high: Position
    high_commit_ts: datetime | None
    snapshot: Snapshot | None
    rows: int | None = None  # the chunk's rows in bronze/snapshots, if its high says
    keys: KeyRange | None = None  # the keys it read, if its high says


def parse_watermark(content: bytes | str, position: Position,
                    commit_ts: datetime | None = None) -> LandedWatermark:
    """Decode a watermark message found at `position` in bronze/changes."""
    try:
        body = parse_body(content)
    except DataError as exc:
        raise DataError(f"bronze/changes at position {position}: {exc}") from exc
    return LandedWatermark(body.backfill_id, body.chunk_id, body.table, body.kind, position,
                     commit_ts, body.snapshot, body.rows, body.keys)


def chunk_windows(watermarks: Iterable[LandedWatermark]) -> list[ChunkWindow]:
    """The chunks whose high watermark is among `watermarks`, with their low one.

    A chunk id is emitted once, but should a watermark be in bronze twice the earliest
    of each kind counts. A high without its low is corrupt input.
    """
    lows: dict[tuple[str, int], LandedWatermark] = {}
    highs: dict[tuple[str, int], LandedWatermark] = {}
    for mark in sorted(watermarks, key=lambda m: m.position):
        (lows if mark.kind == "low" else highs).setdefault((mark.backfill_id, mark.chunk_id),
                                                           mark)
    windows = []
    for chunk, high in sorted(highs.items(), key=lambda item: item[1].position):
        low = lows.get(chunk)
        if low is None or low.position >= high.position or low.table != high.table:
            raise DataError(f"backfill {chunk[0]} chunk {chunk[1]} of {high.table}: high "
                            f"watermark at {high.position} has no matching earlier low "
                            "watermark in bronze/changes; bronze is incomplete")
        windows.append(ChunkWindow(high.backfill_id, high.chunk_id, high.table, low.position,
                                   high.position, high.commit_ts,
                                   high.snapshot or low.snapshot, high.rows, high.keys))
    return windows


def disjoint_keys(windows: Sequence[ChunkWindow]) -> bool:
    """Whether no key is in two of these chunks: they are of one backfill and each
    non-empty one starts at the cursor the one before it ended at (a chunk re-read after
    a crash starts at an earlier cursor; another backfill reads the same keys again).
    Each chunk's key range is what its high watermark says (none said: not proven)."""
    if any(w.keys is None for w in windows) or len({w.backfill_id for w in windows}) > 1:
        return False
    read = [w.keys for w in sorted(windows, key=lambda w: w.chunk_id)
            if w.keys is not None and w.keys.last is not None]
    return all(later.after == earlier.last for earlier, later in zip(read, read[1:]))


def invisible_to_snapshot(xid: Column, xmin: Column, xmax: Column, xip: Column) -> Column:
    """Spark twin of `not Snapshot.sees(xid)`: 32-bit `xid`; 64-bit xmin, xmax, xip."""
    modulo = F.lit(XID_MODULO)
    delta = F.pmod(xid - F.pmod(xmin, modulo), modulo)
    full = xmin + delta
    unseen = (full >= xmax) | F.exists(xip, lambda v: v == full)
    return F.coalesce(xid.isNotNull() & xmin.isNotNull() & (delta < F.lit(HALF_RING)) & unseen,
                      F.lit(False))
