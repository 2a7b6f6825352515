"""DBLog watermarks: logical messages that bracket each backfill chunk in the WAL.

Each watermark is `pg_logical_emit_message(true, WATERMARK_PREFIX, json)` committed in its
own transaction, so it reaches bronze/changes as a message row with a position like any
change. The high watermark also carries the chunk SELECT's snapshot: a transaction whose
commit precedes the low watermark in the WAL can still be invisible to the SELECT
(commit order is not visibility order), and the snapshot tells silver which ones were.
Format: docs/backfill.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

import psycopg

from pipelines.bronze.schema import WATERMARK_PREFIX
from pipelines.errors import DataError

Kind = Literal["low", "high"]


@dataclass(frozen=True)
class Snapshot:
    """pg_current_snapshot() of a chunk's SELECT; xids are 64-bit (xid8)."""

    xmin: int
    xmax: int
    xip: tuple[int, ...]

    def sees(self, xid: int) -> bool:
        """Whether a committed transaction's effects are visible to the snapshot.

        `xid` may be a 64-bit xid or a 32-bit one (pgoutput's Begin); a 32-bit xid is
        taken as the one within 2^31 of xmin, as Postgres itself compares xids.
        """
        if xid < 1 << 32:
            delta = (xid - self.xmin) & 0xFFFFFFFF
            xid = self.xmin + (delta - (1 << 32) if delta >= 1 << 31 else delta)
        return xid < self.xmin or (xid < self.xmax and xid not in self.xip)


@dataclass(frozen=True)
class Watermark:
    """One decoded watermark message."""

    backfill_id: str
    chunk_id: int
    table: str
    kind: Kind
    snapshot: Snapshot | None = None  # high watermarks only

    def to_json(self) -> str:
        body: dict = {"backfill_id": self.backfill_id, "chunk_id": self.chunk_id,
                      "table": self.table, "kind": self.kind}
        if self.snapshot is not None:
            body["snapshot"] = {"xmin": self.snapshot.xmin, "xmax": self.snapshot.xmax,
                                "xip": list(self.snapshot.xip)}
        return json.dumps(body, separators=(",", ":"))


def emit_watermark(conn: psycopg.Connection, watermark: Watermark) -> str:
    """Write the watermark to the WAL in its own committed transaction; returns its LSN."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("a watermark needs an autocommit connection outside a transaction")
    return conn.execute("SELECT pg_logical_emit_message(true, %s, %s)::text",
                        (WATERMARK_PREFIX, watermark.to_json())).fetchone()[0]


def parse_watermark(content: bytes | str) -> Watermark:
    """Decode a watermark message's content; malformed content is a DataError."""
    try:
        body = json.loads(content)
        snapshot = body.get("snapshot")
        return Watermark(
            backfill_id=str(body["backfill_id"]), chunk_id=int(body["chunk_id"]),
            table=str(body["table"]), kind=_kind(body["kind"]),
            snapshot=None if snapshot is None else Snapshot(
                int(snapshot["xmin"]), int(snapshot["xmax"]),
                tuple(int(x) for x in snapshot["xip"])))
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"malformed {WATERMARK_PREFIX} message {content!r}: {exc}") from exc


def _kind(value: object) -> Kind:
    if value not in ("low", "high"):
        raise ValueError(f"kind must be 'low' or 'high', got {value!r}")
    return value  # type: ignore[return-value]
