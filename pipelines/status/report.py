"""`lakehouse status`: how far behind the pipeline is, for operators and monitors."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from pipelines.backfill.state import BackfillState, StateStore
from pipelines.config import Config
from pipelines.errors import SourceError
from pipelines.gold.state import Refresh, read_refreshes
from pipelines.bronze.generations import Registry
from pipelines.bronze.landed import landed_lsn
from pipelines.ingest.bronze_writer import read_progress
from pipelines.names import split_table
from pipelines.positions import format_lsn
from pipelines.lake import Lake
from pipelines.silver.progress import progress_rows
from pipelines.source.connection import connect
from pipelines.source.lineage import RECOVER, inspect_lineage


@dataclass(frozen=True)
class SlotStatus:
    """The replication slot as Postgres sees it."""

    slot: str
    exists: bool
    active: bool = False
    confirmed_flush_lsn: str | None = None
    lag_bytes: int | None = None  # current WAL position minus what the pipeline confirmed
    retained_wal_bytes: int | None = None  # WAL kept on the server for this slot
    wal_status: str | None = None
    generation: int = 0  # the lake's current slot generation (pipelines.bronze.generations)
    lineage_problem: str | None = None  # why the slot no longer continues bronze


def slot_status(config: Config) -> SlotStatus:
    lake = Lake.from_config(config)
    lineage = inspect_lineage(config.source.dsn, config.source.slot, lake,
                              landed_lsn(lake.bronze_changes, config.source.slot))
    known = (config.source.slot, lineage.generation.generation, lineage.problem)
    with connect(config.source.dsn) as conn:
        row = query_slot(conn, config.source.slot)
    if row is None:
        return SlotStatus(known[0], False, generation=known[1], lineage_problem=known[2])
    return SlotStatus(known[0], True, *row, generation=known[1], lineage_problem=known[2])


def query_slot(conn: psycopg.Connection, slot: str) -> tuple | None:
    """The slot's row: active, confirmed_flush_lsn (text), lag bytes, retained WAL bytes,
    wal_status; None when there is no such slot. Also read by the metrics endpoint."""
    return conn.execute(
        "SELECT active, confirmed_flush_lsn::text, "
        "pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint, "
        "pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status "
        "FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()


@dataclass(frozen=True)
class LakeStatus:
    """Bronze, silver and gold as the lake records them (read with delta-rs, no Spark)."""

    bronze_commit_at: datetime | None = None  # last Delta commit of bronze/changes
    bronze_newest_change_at: datetime | None = None  # newest source commit landed
    bronze_confirmable_lsn: str | None = None  # end of the last whole transaction landed
    silver: dict[str, dict] = field(default_factory=dict)  # table -> position, run, error,
    # and when its history table was last written (None: it keeps none in the lake)
    gold: dict[str, Refresh] = field(default_factory=dict)  # report -> its last refresh


def lake_status(config: Config) -> LakeStatus:
    lake = Lake.from_config(config)
    if not lake.bronze_changes.exists():
        return LakeStatus()
    bronze = lake.bronze_changes.open()
    files = pa.table(bronze.get_add_actions(flatten=True))  # per-file stats: no data scan
    newest = pc.max(files.column("max.commit_ts")).as_py() if files.num_rows else None
    progress = read_progress(lake.bronze_changes, config.source.slot,
                             Registry(lake).current(config.source.slot))
    silver = {row["table_name"]: {
        "lsn": format_lsn(max(row["lsn"], 0)), "change_index": row["change_index"],
        "last_run_at": row["updated_at"], "error": row["error"],
        "history_written_at": history_written_at(config, lake, row["table_name"])}
        for row in progress_rows(lake.silver_progress)}
    return LakeStatus(commit_time(bronze), newest, format_lsn(progress.end_lsn), silver,
                      read_refreshes(lake))


def history_written_at(config: Config, lake: Lake, table: str) -> datetime | None:
    """When the table's history table in the lake was last written; None without one.
    Only the tables silver.history names are looked for: on an object store each look
    is a request."""
    if not config.silver.keeps_history(table):
        return None
    history = lake.silver_history(*split_table(table))
    return commit_time(history.open()) if history.exists() else None


def commit_time(table: DeltaTable) -> datetime:
    """When the table's last Delta commit was made."""
    millis = table.history(1)[0]["timestamp"]
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc)


def print_status(config: Config, as_json: bool) -> int:
    """Print everything; the lake side even when the source cannot be reached (exit 3)."""
    try:
        slot: SlotStatus | None = slot_status(config)
        source_error = None
    except SourceError as exc:
        slot, source_error = None, exc
    lake = lake_status(config)
    backfills = backfill_status(config)
    resyncs = scheduled_resyncs(config, backfills)
    if as_json:
        print(json.dumps({"slot": asdict(slot) if slot else {"error": str(source_error)},
                          "lake": asdict(lake),
                          "backfills": [b.to_json() for b in backfills],
                          "resyncs_scheduled": resyncs},
                         indent=2, default=str))
    else:
        print("\n".join(status_lines(config, slot, source_error, lake, backfills, resyncs)))
    if source_error:
        return source_error.exit_code
    return SourceError.exit_code if slot and slot.lineage_problem else 0


def status_lines(config: Config, slot: SlotStatus | None, source_error: Exception | None,
                 lake: LakeStatus, backfills: list[BackfillState],
                 resyncs: list[str] = ()) -> list[str]:
    now = datetime.now(timezone.utc)
    lines = []
    if slot is None:
        lines.append(f"source: unreachable ({source_error})")
    elif slot.lineage_problem:
        lines.append(f"slot {slot.slot}: BROKEN: {slot.lineage_problem} {RECOVER}")
    elif not slot.exists:
        lines.append(f"slot {slot.slot}: missing (run lakehouse setup)")
    else:
        generation = f", slot generation {slot.generation}" if slot.generation else ""
        lines.append(f"slot {slot.slot}: {'active' if slot.active else 'inactive'}, "
                     f"confirmed {slot.confirmed_flush_lsn}, lag {_bytes(slot.lag_bytes)}, "
                     f"WAL retained {_bytes(slot.retained_wal_bytes)} ({slot.wal_status})"
                     f"{generation}")
    if lake.bronze_commit_at is None:
        lines.append("bronze: empty (run lakehouse ingest)")
    else:
        newest = (f", newest change committed {_ago(now, lake.bronze_newest_change_at)} ago"
                  if lake.bronze_newest_change_at else "")
        lines.append(f"bronze: last commit {_ago(now, lake.bronze_commit_at)} ago, whole "
                     f"transactions up to {lake.bronze_confirmable_lsn}{newest}")
    for table, info in sorted(lake.silver.items()):
        state = f"error: {info['error']}" if info["error"] else "ok"
        history = (f", history written {_ago(now, info['history_written_at'])} ago"
                   if info["history_written_at"] else "")
        lines.append(f"silver {table}: applied up to {info['lsn']}, last run "
                     f"{_ago(now, info['last_run_at'])} ago{history}, {state}")
    lines += [backfill_line(b) for b in backfills]
    lines += [f"resync {table}: scheduled by `lakehouse recover`, not started: run "
              "`lakehouse backfill`" for table in resyncs]
    for report, refresh in sorted(lake.gold.items()):
        lines.append(f"gold {report}: refreshed {_ago(now, refresh.refreshed_at)} ago, "
                     f"{refresh.summary()}")
    return lines


def _bytes(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,} bytes"


def _ago(now: datetime, then: datetime) -> str:
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    seconds = max(0.0, (now - then).total_seconds())
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# --- backfills (pipelines/backfill): the latest backfill of each table -------------------


def scheduled_resyncs(config: Config, backfills: list[BackfillState]) -> list[str]:
    """Tables whose resync `lakehouse recover` scheduled and no backfill run started."""
    generation = Registry(Lake.from_config(config)).current(config.source.slot)
    started = {b.table_name for b in backfills
               if b.resync and b.generation == generation.generation}
    return [t for t in generation.resync_tables if t not in started]


def backfill_status(config: Config) -> list[BackfillState]:
    """The most recent backfill of each table, from the lake's _state/backfills table."""
    store = StateStore(Lake.from_config(config).backfills)
    return sorted(store.latest_per_table().values(), key=lambda b: b.table_name)


def backfill_line(b: BackfillState) -> str:
    """e.g. 'backfill public.users: running, 120,000 / ~1,000,000 rows (12%), 6 chunks, ...'"""
    rows = f"{b.rows_done:,}"
    if b.rows_estimate:
        rows += f" / ~{b.rows_estimate:,} rows ({min(100, 100 * b.rows_done // b.rows_estimate)}%)"
    else:
        rows += " rows"
    when = b.finished_at if b.finished_at else b.updated_at
    text = (f"{b.kind} {b.table_name}: {b.status}, {rows}, {b.chunks_done:,} chunks, "
            f"{'finished' if b.finished_at else 'updated'} {when:%Y-%m-%d %H:%M:%S} UTC "
            f"(id {b.backfill_id})")
    if b.error:
        text += f"\n  error: {b.error}"
    return text
