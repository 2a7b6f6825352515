"""`lakehouse status`: how far behind the pipeline is, for operators and monitors."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from pipelines.backfill.state import BackfillState, StateStore
from pipelines.config import Config
from pipelines.lake import LakeLayout
from pipelines.source.connection import connect


@dataclass(frozen=True)
class SlotStatus:
    """The replication slot as Postgres sees it."""

    slot: str
    exists: bool
    active: bool = False
    confirmed_flush_lsn: str | None = None
    lag_bytes: int | None = None  # current WAL position minus what the pipeline confirmed
    retained_wal_bytes: int | None = None  # WAL kept on the server for this slot
    wal_status: str | None = None


def slot_status(config: Config) -> SlotStatus:
    with connect(config.source.dsn) as conn:
        row = conn.execute(
            "SELECT active, confirmed_flush_lsn::text, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, "
            "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status "
            "FROM pg_replication_slots WHERE slot_name = %s", (config.source.slot,)).fetchone()
    if row is None:
        return SlotStatus(config.source.slot, exists=False)
    return SlotStatus(config.source.slot, True, *row)


def print_status(config: Config, as_json: bool) -> int:
    slot = slot_status(config)
    backfills = backfill_status(config)
    if as_json:
        print(json.dumps({"slot": asdict(slot),
                          "backfills": [b.to_json() for b in backfills]}, indent=2))
        return 0
    if not slot.exists:
        print(f"slot {slot.slot}: missing (run lakehouse setup)")
    else:
        print(f"slot {slot.slot}: {'active' if slot.active else 'inactive'}, "
              f"confirmed {slot.confirmed_flush_lsn}, lag {slot.lag_bytes} bytes, "
              f"WAL retained {slot.retained_wal_bytes} bytes ({slot.wal_status})")
    for backfill in backfills:
        print(backfill_line(backfill))
    return 0


# --- backfills (pipelines/backfill): the latest backfill of each table -------------------


def backfill_status(config: Config) -> list[BackfillState]:
    """The most recent backfill of each table, from the lake's _state/backfills table."""
    store = StateStore(LakeLayout(config.lake.path).state("backfills"))
    return sorted(store.latest_per_table().values(), key=lambda b: b.table_name)


def backfill_line(b: BackfillState) -> str:
    """e.g. 'backfill public.users: running, 120,000 / ~1,000,000 rows (12%), 6 chunks, ...'"""
    rows = f"{b.rows_done:,}"
    if b.rows_estimate:
        rows += f" / ~{b.rows_estimate:,} rows ({min(100, 100 * b.rows_done // b.rows_estimate)}%)"
    else:
        rows += " rows"
    when = b.finished_at if b.finished_at else b.updated_at
    text = (f"backfill {b.table_name}: {b.status}, {rows}, {b.chunks_done:,} chunks, "
            f"{'finished' if b.finished_at else 'updated'} {when:%Y-%m-%d %H:%M:%S} UTC "
            f"(id {b.backfill_id})")
    if b.error:
        text += f"\n  error: {b.error}"
    return text
