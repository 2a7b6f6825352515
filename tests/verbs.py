"""The pipeline's verbs as processes of their own, as a job runs them, over the demo's
schema as a small source: seeded rows for the backfill, then changes for the stream."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typing import Callable

import psycopg
import yaml

from pipelines.demo.run import DEMO_REPORTS, DEMO_TABLES
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


def lakehouse(config: Path, *args: str, env: dict[str, str] | None = None,
              check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    """`lakehouse --config CONFIG ARGS` in this interpreter; `env` adds to the environment."""
    result = subprocess.run([sys.executable, "-m", "pipelines.cli", "--config", str(config),
                             *args], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    if check:
        assert result.returncode == 0, f"lakehouse {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result


def demo_lake(dsn: str, workdir: Path, *, after_backfill: Callable[[str], None] | None = None,
              gold: bool = False) -> Path:
    """The demo's tables seeded in `dsn`, then `setup`, `backfill`, `after_backfill(dsn)`,
    `ingest` and `silver` (and the demo's `gold` reports) on Sail into workdir/lake;
    returns the config file."""
    seeded(dsn)
    config = workdir / "build.yml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": dsn, "tables": DEMO_TABLES},
        "lake": {"path": str(workdir / "lake")}, "engine": "local",
        **({"gold": {"reports": str(DEMO_REPORTS)}} if gold else {})}))
    for verb in (["setup"], ["backfill"]):
        lakehouse(config, *verb)
    if after_backfill:
        after_backfill(dsn)
    for verb in (["ingest", "--until-idle", "2"], ["silver"], *([["gold"]] if gold else [])):
        lakehouse(config, *verb)
    return config
