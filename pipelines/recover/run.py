"""`lakehouse recover`: continue in place after a lost slot or a failover.

When the slot no longer continues what bronze holds (pipelines.source.lineage: dropped,
invalidated, another server, a promotion from a standby that lacked changes), the lake
is not thrown away. Recover starts a new slot generation on the current source (its
positions sort after everything in bronze, pipelines.bronze.generations) and schedules a
resync of every captured table, or of the ones named. A resync is a backfill that also
deletes what the source no longer has (pipelines.silver.resync): rows deleted while no
slot captured them, and rows only a failed primary ever had. `lakehouse backfill` runs
the scheduled resyncs; until they finish, silver keeps serving the old rows next to the
new changes, and `status` lists what is pending.

The generation is recorded before its slot is created: a crash in between leaves a
generation without a slot, which the next check reports and the next recover replaces.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pipelines.bronze.generations import Generation, Registry, next_generation
from pipelines.config import Config, configured_tables
from pipelines.errors import ConfigError, SourceError
from pipelines.bronze.landed import landed_lsn
from pipelines.positions import format_lsn
from pipelines.lake import Lake
from pipelines.source.connection import connect
from pipelines.source.lineage import Source, inspect_lineage, slot_state
from pipelines.source.setup import (
    check_keys, check_server, ensure_publication, ensure_slot, resolve_tables)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecoverReport:
    """What recover found and did."""

    problem: str | None  # None: nothing to recover
    generation: Generation
    dropped_slot: bool = False
    slot_lsn: str | None = None


def run_recover(config: Config, tables: list[str] | None = None) -> RecoverReport:
    """Start a new slot generation and schedule resyncs, if the lineage is broken."""
    lake = Lake.from_config(config)
    source = config.source
    bronze_end = landed_lsn(lake.bronze_changes, source.slot)
    lineage = inspect_lineage(source.dsn, source.slot, lake, bronze_end)
    if lineage.problem is None:
        return RecoverReport(None, lineage.generation)
    with connect(source.dsn) as conn:
        check_server(conn)
        captured = resolve_tables(conn, source.tables)
        resync = tuple(configured_tables(config, tables) or captured) if tables else captured
        unknown = sorted(set(resync) - set(captured))
        if unknown:
            raise ConfigError(f"not a captured table: {', '.join(unknown)}")
        check_keys(conn, captured)
        state = slot_state(conn, source.slot)
        if state is not None and state.active:
            raise SourceError(f"replication slot {source.slot!r} is in use by another "
                              "connection (an ingest?): stop it, then run recover again")
        server = Source(source.dsn).identify()
        generation = Registry(lake).record(next_generation(
            lineage.generation, source.slot, server.system_identifier, server.timeline,
            server.wal_lsn, bronze_end, resync, lineage.problem))
        if state is not None:  # it cannot continue bronze's stream: replaced
            conn.execute("SELECT pg_drop_replication_slot(%s)", (source.slot,))
            log.info("dropped replication slot %s", source.slot)
        ensure_publication(conn, source.publication, captured)
        _, slot_lsn = ensure_slot(conn, source)
    log.info("slot generation %d started on timeline %d at %s (lake positions from %s)",
             generation.generation, server.timeline, slot_lsn,
             format_lsn(generation.lake_start_lsn))
    return RecoverReport(lineage.problem, generation, state is not None, slot_lsn)
