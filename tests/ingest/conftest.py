"""Fixtures for ingest tests: a published source database and a lake under tmp_path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pipelines.config import Config, parse_config
from pipelines.lake import Lake, read_delta
from pipelines.ingest.run import IngestOptions, IngestReport, StopRequested, run_ingest
from pipelines.source.setup import run_setup

TABLES_SQL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (
    id bigint PRIMARY KEY, i2 smallint, i4 integer, amount numeric(12,3), ratio float8,
    f4 real, flag boolean, name text, code varchar(8), ident uuid, day date,
    at timestamp, at_tz timestamptz, doc jsonb, raw bytea, tags text[], nums int[],
    feeling mood, body text);
ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE members (project int, member int, role text, PRIMARY KEY (project, member));
CREATE TABLE unpublished (id int PRIMARY KEY, v text);
"""


def make_config(dsn: str, lake: Path, **ingest) -> Config:
    settings = {"batch_seconds": 0.1, "status_interval_seconds": 1, **ingest}
    return parse_config({"source": {"dsn": dsn, "tables": ["public.items", "public.members"]},
                         "lake": {"path": str(lake)}, "ingest": settings},
                        base_dir=lake.parent, environ={})


@pytest.fixture
def source(source_dsn, tmp_path) -> Config:
    """A database with the test tables, publication and slot, and a config for it."""
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(TABLES_SQL)
    config = make_config(source_dsn, tmp_path / "lake")
    run_setup(config.source)
    return config


def execute(dsn: str, *statements: str) -> None:
    """Run statements in one transaction."""
    with psycopg.connect(dsn) as conn:
        for statement in statements:
            conn.execute(statement)


def ingest(config: Config, until_idle: float = 0.5) -> IngestReport:
    return run_ingest(config, IngestOptions(until_idle=until_idle), StopRequested())


def bronze(config: Config) -> list[dict]:
    table = read_delta(Lake.from_config(config).bronze_changes)
    return table.sort_by([("commit_lsn", "ascending"), ("change_index", "ascending")]).to_pylist()


def cli(config_path: Path, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "--config",
                             str(config_path), *args], **kwargs)
