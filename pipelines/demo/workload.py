"""A seeded, concurrent OLTP workload on the demo schema.

Several sessions run small transactions against the time-tracking tables: new entries,
edits of the (sometimes TOASTed) description and of other columns, deletes, key changes
in project_members, now and then a large transaction, and a truncate of `scratch`.
Deterministic per seed and session, so a failing demo run can be replayed.

Shape `recent` (the default) is how time entries change in a real application: new
entries start now, and edits and deletes hit the newest 1% of entries (by start time).
`uniform` edits and deletes entries anywhere in the table.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg

from pipelines.demo.seed import EPOCH, ROLES, description, sizes, time_entry

log = logging.getLogger(__name__)


SHAPES = ("recent", "uniform")
RECENT_SHARE = 0.01  # `recent`: edits and deletes hit this share of the newest entries
RETRYABLE = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected,
             psycopg.errors.UniqueViolation, psycopg.errors.ForeignKeyViolation)


@dataclass
class WorkloadStats:
    transactions: int = 0
    statements: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, statements: int) -> None:
        with self.lock:
            self.transactions += 1
            self.statements += statements


class Session:
    """One client connection running random transactions."""

    def __init__(self, dsn: str, rows: int, seed: int, stats: WorkloadStats,
                 shape: str = "recent") -> None:
        self.dsn = dsn
        self.rng = random.Random(seed)
        self.sizes = sizes(rows)
        self.stats = stats
        self.shape = shape
        self.recent = max(10, int(rows * RECENT_SHARE))
        self.clock = EPOCH + timedelta(days=60)  # `recent`: new entries start from here on

    def entry_to_change(self) -> tuple[str, tuple]:
        """A subquery choosing the entry an edit or delete changes, and its parameters."""
        if self.shape == "uniform":
            return "(SELECT id FROM time_entries TABLESAMPLE SYSTEM (1) LIMIT 1)", ()
        return ("(SELECT id FROM time_entries ORDER BY started_at DESC LIMIT 1 OFFSET %s)",
                (self.rng.randrange(self.recent),))

    def start_time(self) -> datetime:
        if self.shape == "uniform":
            return EPOCH + timedelta(minutes=self.rng.randint(0, 60 * 24 * 60))
        self.clock += timedelta(seconds=self.rng.randint(1, 120))
        return self.clock

    def run(self, stop: threading.Event) -> None:
        with psycopg.connect(self.dsn) as conn:
            while not stop.is_set():
                try:
                    statements = self.transaction(conn)
                    conn.commit()
                    self.stats.add(statements)
                except RETRYABLE:
                    conn.rollback()  # sessions raced for the same rows: normal in OLTP
                    with self.stats.lock:
                        self.stats.errors += 1
                time.sleep(self.rng.uniform(0, 0.02))

    def transaction(self, conn: psycopg.Connection) -> int:
        rng = self.rng
        choice = rng.random()
        if choice < 0.005:
            return self.large_transaction(conn)
        if choice < 0.01:
            conn.execute("TRUNCATE scratch")
            conn.execute("INSERT INTO scratch SELECT g, 'note ' || g FROM generate_series(1, 50) g")
            return 2
        statements = rng.randint(1, 5)
        for _ in range(statements):
            self.statement(conn)
        return statements

    def statement(self, conn: psycopg.Connection) -> None:
        rng, n = self.rng, self.sizes
        choice = rng.random()
        if choice < 0.35:
            entry = time_entry(rng, n["users"], n["projects"], self.start_time())
            conn.execute("INSERT INTO time_entries (id, user_id, project_id, started_at, "
                         "stopped_at, duration, description, tags, billable, source, "
                         "metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", entry)
        elif choice < 0.50:  # edit the description: sometimes it becomes large (TOAST)
            entry, params = self.entry_to_change()
            conn.execute(f"UPDATE time_entries SET description = %s WHERE id = {entry}",
                         (description(rng, rng.random() < 0.2), *params))
        elif choice < 0.70:  # other columns: large descriptions stay unchanged TOAST
            entry, params = self.entry_to_change()
            conn.execute("UPDATE time_entries SET billable = billable + 1.25, "
                         f"tags = array_append(tags, 'edited') WHERE id = {entry}", params)
        elif choice < 0.80:
            entry, params = self.entry_to_change()
            conn.execute(f"DELETE FROM time_entries WHERE id = {entry}", params)
        elif choice < 0.88:  # key change in the composite-key table
            conn.execute("UPDATE project_members SET user_id = %s, role = %s WHERE "
                         "(project_id, user_id) = (SELECT project_id, user_id FROM "
                         "project_members ORDER BY random() LIMIT 1) AND NOT EXISTS "
                         "(SELECT 1 FROM project_members m WHERE m.project_id = "
                         "project_members.project_id AND m.user_id = %s)",
                         (rng.randint(1, n["users"]), rng.choice(ROLES),
                          rng.randint(1, n["users"])))
        elif choice < 0.94:
            conn.execute("UPDATE users SET full_name = %s, active = %s WHERE id = %s",
                         (f"User {rng.randint(1, 10**6)}", rng.random() < 0.9,
                          rng.randint(1, n["users"])))
        elif choice < 0.97:
            conn.execute("UPDATE clients SET hourly_rate = hourly_rate + 0.50 WHERE id = %s",
                         (rng.randint(1, n["clients"]),))
        else:
            conn.execute("UPDATE projects SET name = %s WHERE id = %s",
                         (f"Project {uuid.UUID(int=rng.getrandbits(128)).hex[:6]}",
                          rng.randint(1, n["projects"])))

    def large_transaction(self, conn: psycopg.Connection) -> int:
        """Thousands of changes in one transaction (a bulk re-rating)."""
        project = self.rng.randint(1, self.sizes["projects"])
        conn.execute("UPDATE time_entries SET billable = round(billable * 1.02, 2) "
                     "WHERE project_id <= %s", (project,))
        return 1


def run_workload(dsn: str, rows: int, sessions: int, seconds: float,
                 seed: int = 11, shape: str = "recent") -> WorkloadStats:
    """Run `sessions` concurrent sessions for `seconds`."""
    stats = WorkloadStats()
    stop = threading.Event()
    threads = [threading.Thread(target=Session(dsn, rows, seed + i, stats, shape).run,
                                args=(stop,), name=f"workload-{i}") for i in range(sessions)]
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return stats
