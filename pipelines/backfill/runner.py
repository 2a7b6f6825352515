"""`lakehouse backfill`: check the tables and the source, then one job per table.

DBLog: each table is read in keyset chunks on its key, each chunk between a low and a
high watermark in the WAL, while the ingest keeps streaming (pipelines/backfill/job.py).
The checks up front make every refusal a clear error before anything is written.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psycopg

from pipelines.backfill.job import TableBackfill, TableResult
from pipelines.backfill.progress import ProgressDisplay
from pipelines.backfill.state import StateStore, pending_resyncs
from pipelines.bronze.schema import SNAPSHOTS_SCHEMA
from pipelines.config import Config, SourceConfig
from pipelines.errors import ConfigError, SourceError
from pipelines.lake import Lake, with_log_retention
from pipelines.bronze.landed import landed_lsn
from pipelines.names import qualify_table
from pipelines.source.connection import connect
from pipelines.source.lineage import inspect_lineage
from pipelines.source.setup import check_keys, resolve_tables

__all__ = ["BackfillOptions", "TableResult", "run_backfill"]


@dataclass(frozen=True)
class BackfillOptions:
    """What to backfill and how (CLI flags over config.backfill)."""

    tables: tuple[str, ...] = ()  # empty: every configured table
    chunk_size: int = 50_000
    restart: bool = False
    parallel: int = 1
    resync: bool = False  # also delete what the source no longer has (docs/backfill.md)

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ConfigError(f"--chunk-size: got {self.chunk_size}, expected a positive number")
        if self.parallel < 1:
            raise ConfigError(f"--parallel: got {self.parallel}, expected a positive number")


def run_backfill(config: Config, options: BackfillOptions,
                 display: ProgressDisplay | None = None,
                 stop: threading.Event | None = None) -> list[TableResult]:
    """Backfill the selected tables, `options.parallel` at a time; `stop` ends it early.

    Resyncs that `lakehouse recover` scheduled run too: for every table when none is
    named, else for the named ones."""
    lake = Lake.from_config(config)
    with connect(config.source.dsn) as conn:
        tables = select_tables(conn, config.source, options.tables)
        check_keys(conn, tables)
        check_published(conn, config.source.publication, tables)
        check_slot(conn, config.source.slot)
    lineage = inspect_lineage(config.source.dsn, config.source.slot, lake,
                              landed_lsn(lake.bronze_changes, config.source.slot))
    if lineage.problem:  # chunks would land in a stream bronze no longer continues
        raise lineage.error()
    store = StateStore(lake.backfills)
    store.ensure()
    generation = lineage.generation
    resyncs = set(tables if options.resync else pending_resyncs(
        store.all(), generation.generation, generation.resync_tables))
    # Before the table jobs start: the retention's metadata commit would fail their appends.
    snapshots = lake.bronze_snapshots
    with_log_retention(snapshots.create(SNAPSHOTS_SCHEMA,
                                        configuration=snapshots.retention_properties),
                       retention=snapshots.log_retention)
    jobs = [TableBackfill(config.source, table, options.chunk_size, options.restart, store,
                          lake, display or ProgressDisplay(), stop or threading.Event(),
                          generation.generation if table in resyncs else None)
            for table in tables]
    with ThreadPoolExecutor(max_workers=min(options.parallel, len(jobs)),
                            thread_name_prefix="backfill") as pool:
        return list(pool.map(TableBackfill.run, jobs))


def select_tables(conn: psycopg.Connection, source: SourceConfig,
                  requested: tuple[str, ...]) -> tuple[str, ...]:
    """The requested tables (default: all configured), each checked to be configured."""
    configured = resolve_tables(conn, source.tables)
    if not requested:
        return configured
    names = tuple(dict.fromkeys(qualify_table(t) for t in requested))
    unknown = [t for t in names if t not in configured]
    if unknown:
        raise ConfigError(f"not a configured table: {', '.join(unknown)}. Configured: "
                          f"{', '.join(configured)}. Add it to source.tables and run "
                          "lakehouse setup before backfilling it.")
    return names


def check_published(conn: psycopg.Connection, publication: str, tables: tuple[str, ...]) -> None:
    """Changes of an unpublished table never reach bronze, so its snapshot could not merge."""
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                    (publication,)).fetchone() is None:
        raise SourceError(f"publication {publication!r} does not exist: run lakehouse setup "
                          "before backfilling")
    published = {r[0] for r in conn.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
        (publication,))}
    missing = [t for t in tables if t not in published]
    if missing:
        raise ConfigError(f"table(s) not in publication {publication!r}: {', '.join(missing)}. "
                          "Run lakehouse setup (it publishes every configured table), then "
                          "backfill again.")


def check_slot(conn: psycopg.Connection, slot: str) -> None:
    """Watermarks and changes only reach bronze through the slot: it must exist first."""
    if conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s "
                    "AND database = current_database()", (slot,)).fetchone() is None:
        raise SourceError(f"replication slot {slot!r} does not exist in this database: run "
                          "lakehouse setup first (a snapshot taken before the slot exists "
                          "would miss the changes made in between)")
