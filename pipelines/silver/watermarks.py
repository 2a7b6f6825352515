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

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from pyspark.sql import Column
from pyspark.sql import functions as F

from pipelines.errors import DataError

Position = tuple[int, int]  # (commit_lsn, change_index)

XID_MODULO = 1 << 32
_HALF = 1 << 31


@dataclass(frozen=True)
class Snapshot:
    """A transaction snapshot as pg_current_snapshot() reports it (64-bit xids)."""

    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()

    def sees(self, xid: int | None) -> bool:
        """Whether the committed transaction with this 32-bit xid is visible to it.

        The 32-bit xid is widened to the 64-bit one within 2^31 of xmin, the way Postgres
        compares xids (older ones are long finished, so visible).
        """
        if xid is None:
            return True
        delta = (xid - self.xmin) % XID_MODULO
        if delta >= _HALF:  # before xmin
            return True
        full = self.xmin + delta
        return full < self.xmax and full not in self.xip


@dataclass(frozen=True)
class Watermark:
    """One watermark message as it landed in bronze."""

    backfill_id: str
    chunk_id: int
    table: str  # schema.table
    kind: str  # "low" | "high"
    position: Position
    commit_ts: datetime | None = None
    snapshot: Snapshot | None = None


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


def parse_watermark(content: bytes | str, position: Position,
                    commit_ts: datetime | None = None) -> Watermark:
    """Decode a watermark message's JSON content; DataError when it is not one."""
    try:
        doc: Any = json.loads(content)
        kind = doc["kind"]
        if kind not in ("low", "high"):
            raise ValueError(f"kind {kind!r}")
        table = str(doc["table"])
        if "." not in table:
            raise ValueError(f"table {table!r} is not schema.table")
        snapshot = _snapshot(doc.get("snapshot"))
        return Watermark(str(doc["backfill_id"]), int(doc["chunk_id"]), table, kind,
                         position, commit_ts, snapshot)
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"bronze/changes at position {position}: malformed backfill "
                        f"watermark ({exc}): {content!r:.200}") from exc


def _snapshot(raw: Any) -> Snapshot | None:
    if raw is None:
        return None
    xmin, xmax = int(raw["xmin"]), int(raw["xmax"])
    xip = tuple(int(x) for x in raw.get("xip") or ())
    if not 0 <= xmin <= xmax or any(not xmin <= x < xmax for x in xip):
        raise ValueError(f"inconsistent snapshot {raw!r}")
    return Snapshot(xmin, xmax, xip)


def chunk_windows(watermarks: Iterable[Watermark]) -> list[ChunkWindow]:
    """The chunks whose high watermark is among `watermarks`, with their low one.

    A chunk id is emitted once, but should a watermark be in bronze twice the earliest
    of each kind counts. A high without its low is corrupt input.
    """
    lows: dict[tuple[str, int], Watermark] = {}
    highs: dict[tuple[str, int], Watermark] = {}
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
                                   high.snapshot or low.snapshot))
    return windows


def invisible_to_snapshot(xid: Column, xmin: Column, xmax: Column, xip: Column) -> Column:
    """Spark twin of `not Snapshot.sees(xid)`: 32-bit `xid`; 64-bit xmin, xmax, xip."""
    modulo = F.lit(XID_MODULO)
    delta = F.pmod(xid - F.pmod(xmin, modulo), modulo)
    full = xmin + delta
    unseen = (full >= xmax) | F.exists(xip, lambda v: v == full)
    return F.coalesce(xid.isNotNull() & xmin.isNotNull() & (delta < F.lit(_HALF)) & unseen,
                      F.lit(False))
