"""Ways a replication slot gets lost, for the tests that recover from it."""

from __future__ import annotations

import psycopg


def invalidate_slot(dsn: str, slot: str = "lakehouse") -> None:
    """Make the server remove WAL the (stopped) slot needs: max_slot_wal_keep_size."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
        conn.execute("SELECT pg_reload_conf()")
        try:
            for _ in range(40):
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS filler (x text)")
                conn.execute("INSERT INTO filler SELECT repeat('x', 1000) "
                             "FROM generate_series(1, 3000)")
                conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                status = conn.execute("SELECT wal_status FROM pg_replication_slots "
                                      "WHERE slot_name = %s", (slot,)).fetchone()[0]
                if status == "lost":
                    return
            raise AssertionError(f"the slot was not invalidated (wal_status {status})")
        finally:
            conn.execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
            conn.execute("SELECT pg_reload_conf()")
