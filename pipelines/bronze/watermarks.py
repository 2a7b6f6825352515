"""DBLog watermarks: the logical messages that bracket each backfill chunk in the WAL.

The backfill writes them; silver reads them from bronze/changes. One definition of the
format (docs/backfill.md) and of snapshot visibility serves both. The high watermark
carries the chunk SELECT's snapshot: a transaction whose commit precedes the low
watermark in the WAL can still be invisible to the SELECT (commit order is not
visibility order), and the snapshot tells silver which ones were.

The high watermark also says which keys the chunk read (`KeyRange`): those after the
cursor it started from, up to its last row's. Chunks of one backfill that follow each
other's cursors cover disjoint keys, which lets silver skip ordering their rows per key.

A resync (a backfill that also removes what the source no longer has) ends with a third
kind, "resync", emitted after its last high watermark: from there silver deletes the
table's rows that the resync's chunks did not return and no change since re-created.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pipelines.bronze.schema import WATERMARK_PREFIX
from pipelines.errors import DataError

Kind = Literal["low", "high", "resync"]
KINDS = ("low", "high", "resync")
XID_MODULO = 1 << 32
HALF_RING = 1 << 31  # xids compare modulo 2^32 within half the ring


@dataclass(frozen=True)
class Snapshot:
    """pg_current_snapshot() of a chunk's SELECT; xids are 64-bit (xid8)."""

    xmin: int
    xmax: int
    xip: tuple[int, ...] = ()

    def sees(self, xid: int | None) -> bool:
        """Whether a committed transaction's effects are visible to the snapshot.

        `xid` may be 64-bit, or 32-bit as pgoutput's Begin sends it: then it is widened
        to the xid within 2^31 of xmin, as Postgres compares xids (older ones are long
        finished, so visible). None (no transaction) is visible.
        """
        if xid is None:
            return True
        if xid < XID_MODULO:
            delta = (xid - self.xmin) % XID_MODULO
            if delta >= HALF_RING:  # before xmin
                return True
            xid = self.xmin + delta
        return xid < self.xmin or (xid < self.xmax and xid not in self.xip)


@dataclass(frozen=True)
class KeyRange:
    """The keys a chunk read, in keyset order: after `after` (None: from the table's first
    key) up to and including `last` (None: the chunk was empty). Key values are text, as
    the backfill's cursor keeps them."""

    after: tuple[str, ...] | None
    last: tuple[str, ...] | None

    def to_json(self) -> dict:
        return {"after": None if self.after is None else list(self.after),
                "last": None if self.last is None else list(self.last)}


@dataclass(frozen=True)
class Watermark:
    """One watermark: which chunk of which backfill, low or high (or a resync's end)."""

    backfill_id: str
    chunk_id: int
    table: str  # schema.table
    kind: Kind
    snapshot: Snapshot | None = None  # high watermarks only
    rows: int | None = None  # high watermarks only: the chunk's rows in bronze/snapshots
    keys: KeyRange | None = None  # high watermarks only: the keys the chunk read

    def to_json(self) -> str:
        body: dict = {"backfill_id": self.backfill_id, "chunk_id": self.chunk_id,
                      "table": self.table, "kind": self.kind}
        if self.snapshot is not None:
            body["snapshot"] = {"xmin": self.snapshot.xmin, "xmax": self.snapshot.xmax,
                                "xip": list(self.snapshot.xip)}
        if self.rows is not None:
            body["rows"] = self.rows
        if self.keys is not None:
            body["keys"] = self.keys.to_json()
        return json.dumps(body, separators=(",", ":"))


def parse_watermark(content: bytes | str) -> Watermark:
    """Decode a watermark message's content; malformed content is a DataError."""
    try:
        body: Any = json.loads(content)
        kind = body["kind"]
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        table = str(body["table"])
        if "." not in table:
            raise ValueError(f"table {table!r} is not schema.table")
        return Watermark(str(body["backfill_id"]), int(body["chunk_id"]), table, kind,
                         _snapshot(body.get("snapshot")), _rows(body.get("rows")),
                         _key_range(body.get("keys")))
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"malformed backfill watermark ({WATERMARK_PREFIX} message: {exc}): "
                        f"{content!r:.200}") from exc


def _rows(raw: Any) -> int | None:
    """A chunk's row count (watermarks written before it was added carry none)."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise ValueError(f"rows must be a whole number >= 0, got {raw!r}")
    return raw


def _key_range(raw: Any) -> KeyRange | None:
    """A chunk's key range (watermarks written before it was added carry none)."""
    if raw is None:
        return None
    return KeyRange(_key(raw["after"]), _key(raw["last"]))


def _key(raw: Any) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or \
            not all(v is None or isinstance(v, str) for v in raw):
        raise ValueError(f"a key must be a list of text values, got {raw!r}")
    return tuple(raw)


def _snapshot(raw: Any) -> Snapshot | None:
    if raw is None:
        return None
    xmin, xmax = int(raw["xmin"]), int(raw["xmax"])
    xip = tuple(sorted(int(x) for x in raw.get("xip") or ()))
    if not 0 <= xmin <= xmax or any(not xmin <= x < xmax for x in xip):
        raise ValueError(f"inconsistent snapshot {raw!r}")
    return Snapshot(xmin, xmax, xip)
