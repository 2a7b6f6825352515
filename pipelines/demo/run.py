"""`lakehouse demo`: the pipeline on embedded defaults, from an empty machine.

Starts a local Postgres (wal_level=logical) under the work dir, creates the
time-tracking schema with seed rows (before the slot exists, so the backfill has real
work), runs `setup`, and writes the effective config to <workdir>/lakehouse.yml so
every other verb can be pointed at the demo (`lakehouse --config .lakehouse/lakehouse.yml status`).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import psycopg
import yaml

from pipelines.config import Config, load_config
from pipelines.demo.seed import create_schema, seed
from pipelines.embedded_pg import EmbeddedPostgres, server_dir_for
from pipelines.source.setup import run_setup
from pipelines.status import print_status

log = logging.getLogger(__name__)

DEMO_PORT = 54329
DEMO_DB = "timetracking"
DEMO_TABLES = ["public.users", "public.clients", "public.projects", "public.project_members",
               "public.time_entries", "public.scratch"]


@dataclass(frozen=True)
class DemoOptions:
    workdir: Path = Path(".lakehouse")
    rows: int = 20_000
    seconds: float = 20.0
    fresh: bool = False


def run_demo(options: DemoOptions) -> int:
    workdir = options.workdir.resolve()
    server = EmbeddedPostgres(server_dir_for(workdir / "pg"), DEMO_PORT)
    if options.fresh:
        server.stop()
        shutil.rmtree(server.data_dir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    server.start()
    try:
        config = write_config(workdir, server.dsn(DEMO_DB))
        prepare_source(server, options.rows)
        report = run_setup(config.source)
        print(f"source ready: {len(report.tables)} tables published, slot "
              f"{config.source.slot} {'created' if report.slot_created else 'reused'}")
        return print_status(config, as_json=False)
    finally:
        server.stop()


def write_config(workdir: Path, dsn: str) -> Config:
    """The demo's config file, usable with every verb while the demo server runs."""
    path = workdir / "lakehouse.yml"
    path.write_text(yaml.safe_dump({
        "source": {"dsn": dsn, "slot": "lakehouse", "publication": "lakehouse",
                   "tables": DEMO_TABLES},
        "lake": {"path": "lake"},
        "engine": "local",
        "ingest": {"batch_seconds": 0.5},
        "backfill": {"chunk_size": 5000},
        "silver": {"interval_seconds": 5},
    }, sort_keys=False))
    return load_config(path, environ={})


def prepare_source(server: EmbeddedPostgres, rows: int) -> None:
    """Create the demo database and seed it, once."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                              (DEMO_DB,)).fetchone()
        if exists:
            return
        conn.execute(f"CREATE DATABASE {DEMO_DB}")
    with psycopg.connect(server.dsn(DEMO_DB)) as conn:
        create_schema(conn)
        counts = seed(conn, rows)
    log.info("seeded the demo source: %s", counts)
