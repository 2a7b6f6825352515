"""Fixtures for backfill tests: a source database with replication set up, a lake, a CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import yaml

from pipelines.backfill.runner import BackfillOptions, TableResult, run_backfill
from pipelines.backfill.state import BackfillState, StateStore
from pipelines.bronze.schema import SHAPE_LISTS
from pipelines.config import Config, parse_config
from pipelines.lake import Lake
from pipelines.source.setup import run_setup
from pipelines.source.text_format import with_text_format


def make_config(dsn: str, lake: Path, tables: list[str]) -> Config:
    return parse_config({"source": {"dsn": dsn, "tables": tables}, "lake": {"path": str(lake)}},
                        base_dir=lake.parent, environ={})


def setup_source(dsn: str, ddl: str, tables: list[str]) -> None:
    """Create the tables (with rows) and then the publication and slot."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ddl)
    run_setup(make_config(dsn, Path("unused"), tables).source)


def backfill(config: Config, *tables: str, chunk_size: int = 50, restart: bool = False,
             parallel: int = 1) -> list[TableResult]:
    results = run_backfill(config, BackfillOptions(tables, chunk_size, restart, parallel))
    for result in results:
        assert result.error is None, result.error
    return results


def snapshot_rows(config: Config, table: str | None = None) -> list[dict]:
    """bronze/snapshots rows, each with its chunk's shape lists (the backfill writes them
    on the chunk's row 0 only)."""
    snapshots = Lake.from_config(config).bronze_snapshots.open()
    rows = snapshots.to_pyarrow_dataset().to_table(use_threads=False).to_pylist()  # see StateStore.all
    shapes = {(r["backfill_id"], r["chunk_id"]): {k: r[k] for k in SHAPE_LISTS}
              for r in rows if r["row_index"] == 0}
    rows = [{**r, **shapes[r["backfill_id"], r["chunk_id"]]} for r in rows]
    if table is not None:
        schema, name = table.split(".")
        rows = [r for r in rows if (r["schema_name"], r["table_name"]) == (schema, name)]
    return rows


def states(config: Config) -> list[BackfillState]:
    return StateStore(Lake.from_config(config).backfills).all()


def select_text(dsn: str, query: str) -> list[tuple[str | None, ...]]:
    """Rows as the types' output functions render them (what pgoutput sends), NULL as None."""
    with psycopg.connect(with_text_format(dsn)) as conn, conn.cursor() as cur:
        cur.execute(query)
        result = cur.pgresult
        return [tuple(None if (v := result.get_value(r, c)) is None else v.decode()
                      for c in range(result.nfields)) for r in range(result.ntuples)]


def write_config_file(config: Config, path: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "source": {"dsn": config.source.dsn, "tables": list(config.source.tables)},
        "lake": {"path": str(config.lake.path)}}))
    return path


def cli(config_file: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "--config", str(config_file),
                           *args], capture_output=True, text=True, timeout=60, **kwargs)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"
