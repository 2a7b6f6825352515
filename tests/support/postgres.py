"""Databases of their own on the tests' PostgreSQL server."""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import Iterator

import psycopg

from pipelines.embedded_pg import EmbeddedPostgres
from tests.support.slots import drop_slot


@contextmanager
def fresh_database(server: EmbeddedPostgres) -> Iterator[str]:
    """A new database on `server`; it and its replication slots are dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield server.dsn(name)
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        slots = conn.execute("SELECT slot_name FROM pg_replication_slots WHERE database = %s",
                             (name,)).fetchall()
        for (slot,) in slots:  # a slot left behind is in the way of every later test
            drop_slot(server.dsn(), slot)  # also while its walsender is still exiting
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
