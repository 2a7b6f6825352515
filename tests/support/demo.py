"""The demo's schema as a small source: seeded rows for a backfill, then changes for the
stream; and a demo lake built by the pipeline's verbs, each a process of its own as a job
runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import psycopg

from pipelines.demo.run import DEMO_REPORTS, DEMO_TABLES
from pipelines.demo.seed import create_schema, seed
from tests.support.cli import lakehouse
from tests.support.config import write_config


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


def demo_lake(dsn: str, workdir: Path, *, after_backfill: Callable[[str], None] | None = None,
              gold: bool = False) -> Path:
    """The demo's tables seeded in `dsn`, then `setup`, `backfill`, `after_backfill(dsn)`,
    `ingest` and `silver` (and the demo's `gold` reports) on Sail into workdir/lake;
    returns the config file."""
    seeded(dsn)
    reports = {"gold": {"reports": str(DEMO_REPORTS)}} if gold else {}
    config = write_config(workdir / "build.yml", dsn, workdir / "lake", DEMO_TABLES,
                          engine="local", **reports)
    for verb in (["setup"], ["backfill"]):
        lakehouse(config, *verb)
    if after_backfill:
        after_backfill(dsn)
    for verb in (["ingest", "--until-idle", "2"], ["silver"], *([["gold"]] if gold else [])):
        lakehouse(config, *verb)
    return config
