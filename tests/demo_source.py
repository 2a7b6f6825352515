"""The demo's schema as a small source for tests that run the pipeline's verbs as
processes: seeded rows for the backfill, then changes for the stream."""

from __future__ import annotations

import psycopg

from pipelines.demo.seed import create_schema, seed


def seeded(dsn: str, rows: int = 300) -> None:
    with psycopg.connect(dsn) as conn:
        create_schema(conn)
        seed(conn, rows)


def change_after_snapshot(dsn: str) -> None:
    """Updates and deletes made after the backfill, for the ingest to carry."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE time_entries SET description = 'changed' WHERE id IN "
                     "(SELECT id FROM time_entries ORDER BY id LIMIT 20)")
        conn.execute("DELETE FROM project_members WHERE user_id = 1")
