"""Replication slots dropped or invalidated on purpose: for the tests that recover from a
lost slot, and for each test database's teardown (tests/support/postgres.py)."""

from __future__ import annotations

import psycopg


def drop_slot(dsn: str, slot: str = "lakehouse") -> None:
    """Drop the slot even while an ingest streams from it and reconnects at once: the
    terminate and the drop are retried server-side, so the drop wins the race."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""DO $$ BEGIN FOR i IN 1..500 LOOP BEGIN
            PERFORM pg_terminate_backend(active_pid) FROM pg_replication_slots
              WHERE slot_name = %(slot)s AND active_pid IS NOT NULL;
            PERFORM pg_drop_replication_slot(%(slot)s); RETURN;
            EXCEPTION WHEN object_in_use THEN PERFORM pg_sleep(0.005); END; END LOOP;
            RAISE 'slot still in use'; END $$""".replace("%(slot)s", _literal(slot)))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


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
