"""Backfill tests' steps and reads: a source with replication set up, a backfill that
must succeed, and what it left in bronze, in its state table and in the source."""

from __future__ import annotations

import psycopg

from pipelines.backfill.runner import BackfillOptions, TableResult, run_backfill
from pipelines.backfill.state import BackfillState, StateStore
from pipelines.bronze.schema import SHAPE_LISTS
from pipelines.config import Config
from pipelines.lake import Lake
from pipelines.source.setup import run_setup
from pipelines.source.text_format import with_text_format
from tests.support.config import make_config


def setup_source(dsn: str, ddl: str, tables: list[str]) -> None:
    """Create the tables (with rows) and then the publication and slot."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ddl)
    run_setup(make_config(dsn, tables=tables).source)


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
