"""`lakehouse status`: how far behind the pipeline is, for operators and monitors."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from pipelines.config import Config
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
    if as_json:
        print(json.dumps({"slot": asdict(slot)}, indent=2))
        return 0
    if not slot.exists:
        print(f"slot {slot.slot}: missing (run lakehouse setup)")
        return 0
    print(f"slot {slot.slot}: {'active' if slot.active else 'inactive'}, "
          f"confirmed {slot.confirmed_flush_lsn}, lag {slot.lag_bytes} bytes, "
          f"WAL retained {slot.retained_wal_bytes} bytes ({slot.wal_status})")
    return 0
