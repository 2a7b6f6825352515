"""Deterministic demo data: the rows that exist before the slot, for the backfill to find."""

from __future__ import annotations

import random
import uuid
from datetime import date, datetime, timedelta, timezone
from importlib import resources

import psycopg

EPOCH = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)
ROLES = ("owner", "developer", "designer", "viewer")
TAGS = ("meeting", "review", "deploy", "support", "research", "ops")
WORDS = ("fixed", "the", "invoice", "export", "bug", "and", "met", "client", "about",
         "roadmap", "refactor", "tests", "for", "reports")


def create_schema(conn: psycopg.Connection) -> None:
    conn.execute(resources.files("pipelines.demo").joinpath("schema.sql").read_text())


def description(rng: random.Random, large: bool) -> str:
    """A short note, or one long enough (> 2 kB, storage EXTERNAL) to live in TOAST."""
    words = rng.choices(WORDS, k=rng.randint(3, 12))
    text = " ".join(words)
    return (text + " ") * 400 if large else text


def time_entry(rng: random.Random, users: int, projects: int, start: datetime) -> tuple:
    minutes = rng.randint(5, 240)
    stop = start + timedelta(minutes=minutes)
    return (str(uuid.UUID(int=rng.getrandbits(128))), rng.randint(1, users),
            rng.randint(1, projects), start, stop, timedelta(minutes=minutes),
            description(rng, rng.random() < 0.05),
            rng.sample(TAGS, rng.randint(0, 3)), round(rng.uniform(0, 300), 2),
            rng.choice(("timer", "manual", "import")),
            psycopg.types.json.Jsonb({"device": rng.choice(("web", "ios", "cli"))}))


def sizes(rows: int) -> dict[str, int]:
    users = max(10, rows // 100)
    clients = max(3, rows // 2000)
    return {"users": users, "clients": clients, "projects": clients * 4, "entries": rows}


def seed(conn: psycopg.Connection, rows: int, seed_value: int = 7) -> dict[str, int]:
    """Load `rows` time entries and the users, clients, projects and members they need."""
    rng = random.Random(seed_value)
    n = sizes(rows)
    with conn.cursor() as cur:
        with cur.copy("COPY users (id, email, full_name, created_at) FROM STDIN") as copy:
            for i in range(1, n["users"] + 1):
                copy.write_row((i, f"user{i}@example.com", f"User {i}", EPOCH))
        with cur.copy("COPY clients (id, name, hourly_rate, country) FROM STDIN") as copy:
            for i in range(1, n["clients"] + 1):
                copy.write_row((i, f"Client {i}", round(rng.uniform(40, 180), 2),
                                rng.choice(("DE", "FR", "US", "GB"))))
        with cur.copy("COPY projects (id, client_id, name, billable, started_on) "
                      "FROM STDIN") as copy:
            for i in range(1, n["projects"] + 1):
                copy.write_row((i, (i - 1) % n["clients"] + 1, f"Project {i}",
                                rng.random() < 0.8, date(2025, 1, 1) + timedelta(days=i)))
        members = set()
        with cur.copy("COPY project_members (project_id, user_id, role, joined_at) "
                      "FROM STDIN") as copy:
            for project in range(1, n["projects"] + 1):
                for user in rng.sample(range(1, n["users"] + 1), min(5, n["users"])):
                    members.add((project, user))
                    copy.write_row((project, user, rng.choice(ROLES), EPOCH))
        with cur.copy("COPY time_entries (id, user_id, project_id, started_at, stopped_at, "
                      "duration, description, tags, billable, source, metadata) "
                      "FROM STDIN") as copy:
            for i in range(rows):
                start = EPOCH + timedelta(minutes=37 * i % (60 * 24 * 60))
                copy.write_row(time_entry(rng, n["users"], n["projects"], start))
    conn.commit()
    return {**n, "members": len(members)}
