"""Is the slot still the one bronze's positions came from? Checked before every stream.

Postgres says which server it is (system identifier), on which timeline, and how its
timelines forked (IDENTIFY_SYSTEM and TIMELINE_HISTORY on a replication connection, so
the REPLICATION privilege the ingest already needs is enough). Together with the slot's
state and the lake's current slot generation (pipelines.bronze.generations) that tells:

- the slot is missing or invalidated while bronze holds changes from it: changes since
  are lost to the lake;
- the source is another server (a restored copy, a logical replica, a new database), or
  the same one rolled back (its WAL ends before bronze does: a disk snapshot restored);
- the source was promoted from a standby that forked before the end of what bronze
  holds: bronze has transactions the new primary never had;
- or the lineage is intact: same server, or a promotion whose new timeline contains
  everything bronze holds (a failover slot synced to the standby continues as is).

In the first three cases every command that would stream or report stops with exit 3
and names the one command that recovers in place: `lakehouse recover`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Callable

import psycopg
from psycopg import pq

from pipelines.bronze.generations import Generation, Registry
from pipelines.errors import SourceError
from pipelines.positions import format_lsn, parse_lsn
from pipelines.lake import Lake
from pipelines.source.text_format import with_text_format

log = logging.getLogger(__name__)

RECOVER = ("Run `lakehouse recover` to continue in place (docs/operations.md, "
           "'Lost or invalidated slot' and 'Failover').")


class LineageBroken(SourceError):
    """The slot no longer continues bronze's stream: reconnecting cannot help (exit 3)."""


@dataclass(frozen=True)
class ServerIdentity:
    """IDENTIFY_SYSTEM: which server, which timeline, and its current WAL position."""

    system_identifier: str
    timeline: int
    wal_lsn: int


@dataclass(frozen=True)
class SlotState:
    """The slot's row in pg_replication_slots (columns vary by Postgres version)."""

    plugin: str
    database: str
    confirmed_flush_lsn: int
    wal_status: str | None = None
    invalidation_reason: str | None = None  # 17+
    conflicting: bool | None = None  # 16+
    failover: bool | None = None  # 17+
    synced: bool | None = None  # 17+
    active: bool = False

    @property
    def invalidated(self) -> str | None:
        """Why the slot can no longer stream (None: it can)."""
        if self.invalidation_reason:
            return self.invalidation_reason
        if self.wal_status == "lost":
            return "WAL it needed was removed (max_slot_wal_keep_size)"
        if self.conflicting:
            return "it conflicts with recovery on a standby"
        return None


@dataclass(frozen=True)
class Lineage:
    """The outcome of a check: the generation to stream in, a row to record, or why not."""

    generation: Generation
    record: Generation | None = None  # a new registry row (identity first seen, promotion)
    problem: str | None = None  # what broke (the error adds what to do)

    def error(self) -> "LineageBroken":
        return LineageBroken(f"{self.problem} {RECOVER}")


class Source:
    """Replication-protocol queries on a short-lived replication connection."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def _query(self, command: str) -> list[tuple[Any, ...]]:
        conn = pq.PGconn.connect(with_text_format(self.dsn, replication="database").encode())
        try:
            if conn.status != pq.ConnStatus.OK:
                raise SourceError("cannot open a replication connection: "
                                  f"{conn.error_message.decode(errors='replace').strip()}")
            result = conn.exec_(command.encode())
            if result.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
                raise SourceError(f"{command} failed: "
                                  f"{result.error_message.decode(errors='replace').strip()}")
            return [tuple(result.get_value(r, c) for c in range(result.nfields))
                    for r in range(result.ntuples)]
        finally:
            conn.finish()

    def command(self, command: str) -> None:
        """A replication command without a result worth reading (ALTER_REPLICATION_SLOT)."""
        self._query(command)

    def identify(self) -> ServerIdentity:
        [(system_id, timeline, wal, *_)] = self._query("IDENTIFY_SYSTEM")
        return ServerIdentity(system_id.decode(), int(timeline), parse_lsn(wal.decode()))

    def timeline_switches(self, timeline: int) -> dict[int, int]:
        """For each ancestor of `timeline`: the LSN where the server switched off it."""
        if timeline <= 1:
            return {}
        [(_, content)] = self._query(f"TIMELINE_HISTORY {int(timeline)}")
        text = content.decode()
        if text.startswith("\\x"):  # bytea in hex text form
            text = bytes.fromhex(text[2:]).decode()
        switches = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0].isdigit():
                switches[int(parts[0])] = parse_lsn(parts[1])
        return switches


def slot_state(conn: psycopg.Connection, slot: str) -> SlotState | None:
    """The slot's state, or None if there is no such slot."""
    row = conn.execute("SELECT to_jsonb(s) FROM pg_replication_slots s WHERE slot_name = %s",
                       (slot,)).fetchone()
    if row is None:
        return None
    s = row[0]
    return SlotState(s["plugin"], s["database"], parse_lsn(s["confirmed_flush_lsn"] or "0/0"),
                     s.get("wal_status"), s.get("invalidation_reason"), s.get("conflicting"),
                     s.get("failover"), s.get("synced"), bool(s.get("active")))


def check_lineage(slot_name: str, slot: SlotState | None, server: ServerIdentity,
                  switches: Callable[[int], dict[int, int]], current: Generation,
                  bronze_end: int) -> Lineage:
    """Whether streaming `slot` continues the lake's current generation.

    bronze_end: the newest lake LSN bronze holds from the ingest (0: nothing).
    """
    held = current.to_source(bronze_end)  # what bronze holds of this generation
    upto = f"up to {format_lsn(held)}" if held else "from earlier generations"
    if slot is None:
        if bronze_end:
            return Lineage(current, problem=(
                f"replication slot {slot_name!r} is missing, but bronze holds changes {upto}: "
                "the changes since (deletes included) can no longer be replayed, and a new "
                "slot would start later and silently skip them."))
        return Lineage(current)
    if slot.invalidated:
        return Lineage(current, problem=(
            f"replication slot {slot_name!r} is invalidated ({slot.invalidated}): it can "
            "no longer stream, and changes after bronze's end were lost."))
    if current.system_identifier is None:  # first check on this lake: remember the server
        identity = replace(current, system_identifier=server.system_identifier,
                           timeline=server.timeline, reason="source identity recorded")
        return Lineage(identity, record=identity)
    if server.system_identifier != current.system_identifier:
        return Lineage(current, problem=(
            f"the source is another server (system identifier {server.system_identifier}) "
            f"than the one slot generation {current.generation} streams from "
            f"({current.system_identifier}): a restored copy or another database cannot "
            "continue bronze's positions."))
    if server.timeline == current.timeline:
        if server.wal_lsn < held:  # it never sends WAL it has not flushed
            return Lineage(current, problem=(
                f"the source's WAL ends at {format_lsn(server.wal_lsn)}, before the "
                f"{format_lsn(held)} bronze holds from it: the server was restored from a "
                "backup or a disk snapshot, and its new transactions would reuse positions "
                "bronze already holds."))
        return Lineage(current)
    switch = switches(server.timeline).get(current.timeline or 1)
    if switch is None:
        return Lineage(current, problem=(
            f"the source is on timeline {server.timeline}, which does not descend from "
            f"timeline {current.timeline} that slot generation {current.generation} streamed "
            "from."))
    if switch < held:
        return Lineage(current, problem=(
            f"the source was promoted to timeline {server.timeline} from a standby that had "
            f"WAL of timeline {current.timeline} only up to {format_lsn(switch)}, but bronze "
            f"holds changes up to {format_lsn(held)}: those transactions never reached the "
            "new primary."))
    promoted = replace(current, timeline=server.timeline, reason=(
        f"promotion to timeline {server.timeline} kept the slot's lineage (timeline "
        f"{current.timeline} ended at {format_lsn(switch)}, bronze ends at "
        f"{format_lsn(held)})"))
    return Lineage(promoted, record=promoted)


def inspect_lineage(dsn: str, slot_name: str, lake: Lake, bronze_end: int) -> Lineage:
    """check_lineage against the live source and the lake's registry (records nothing)."""
    from pipelines.source.connection import connect

    source = Source(dsn)
    with connect(dsn) as conn:
        slot = slot_state(conn, slot_name)
    return check_lineage(slot_name, slot, source.identify(), source.timeline_switches,
                         Registry(lake).current(slot_name), bronze_end)


def ensure_lineage(dsn: str, slot_name: str, lake: Lake, bronze_end: int) -> Generation:
    """The generation to stream in; records what the check learned; exit 3 on a break."""
    lineage = inspect_lineage(dsn, slot_name, lake, bronze_end)
    if lineage.problem:
        raise lineage.error()
    if lineage.record is not None:
        Registry(lake).record(lineage.record)
        log.info("slot %s: %s", slot_name, lineage.record.reason)
    return lineage.generation
