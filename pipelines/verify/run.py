"""`lakehouse verify`: every silver table against the live source, row by row.

The source is read in one REPEATABLE READ snapshot with the backfill's COPY path (so
values render exactly as pgoutput sends them), in keyset chunks written as Parquet to a
scratch directory under the lake (a table of any size neither fills the process nor
goes through Spark Connect's 128 MB message limit), and typed with silver's own type
map; then source and silver are joined on the key: keys only in the source are missing,
keys only in silver are extra, keys whose columns differ (null-safe) are different.
Every table is read before any is compared, so the snapshot ends early; the comparisons
run `silver.parallel_tables` at a time. It first waits until the ingest has confirmed the
source's current WAL position and silver has applied all of bronze, so a quiet source
compares exactly.
"""

from __future__ import annotations

import logging
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterator, Sequence

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.backfill.source_tables import table_shape
from pipelines.backfill.chunk import (
    FIRST_CHUNK_ROWS, chunk_statement, copy_out, next_chunk_rows, parse_csv, row_key)
from pipelines.bronze.schema import OP_MESSAGE
from pipelines.catalog import TableNames, read_table, table_exists
from pipelines.config import Config, configured_tables
from pipelines.lake import Lake
from pipelines.names import split_table
from pipelines.silver.bronze_summary import summarize
from pipelines.silver.chunk_windows import parse_watermark
from pipelines.silver.history import IS_CURRENT
from pipelines.silver.progress import read_progress
from pipelines.silver.table_shape import SourceColumn
from pipelines.silver.types import typed_columns
from pipelines.source.connection import connect
from pipelines.source.setup import resolve_tables
from pipelines.source.text_format import with_text_format
from pipelines.spark_jobs import map_in_threads

log = logging.getLogger(__name__)

CHUNK_ROWS = 500_000  # source rows per COPY and scratch Parquet file, at most
CHUNK_BYTES = 64 << 20  # CSV per COPY, about: wide rows make chunks shorter
STALE_SCRATCH_SECONDS = 24 * 3600  # a verify killed before its cleanup left these


@dataclass(frozen=True)
class TableDiff:
    """How one silver table compares with its source table."""

    table: str
    source_rows: int
    silver_rows: int
    counts: dict[str, int] = field(default_factory=dict)  # missing / extra / different
    examples: dict[str, list[str]] = field(default_factory=dict)  # first keys of each kind
    # the history table's current rows against silver (None: the table keeps no history)
    history: dict[str, int] | None = None
    history_examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        return not any(self.counts.values()) and not any((self.history or {}).values())


class NotCaughtUp(Exception):
    """The pipeline has not reached the source's position: a comparison would mislead."""


def wait_for_ingest(config: Config, timeout: float) -> str:
    """Wait until bronze holds every change up to the source's current WAL position.

    That is so once the slot confirmed the position, or, with no ingest attached, when
    what the slot still holds up to it contains no change of the publication (Postgres
    writes WAL of its own, e.g. checkpoints, that nobody needs to confirm).
    """
    with connect(config.source.dsn) as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        deadline = time.monotonic() + timeout
        while True:
            behind = conn.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, confirmed_flush_lsn)::bigint, active "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (target, config.source.slot)).fetchone()
            if behind is not None and (behind[0] <= 0 or (
                    not behind[1] and not pending_changes(conn, config, target))):
                return target
            if time.monotonic() >= deadline:
                raise NotCaughtUp(
                    f"bronze has not reached the source's WAL position {target} "
                    f"({behind[0] if behind else '?'} bytes behind): is `lakehouse ingest` "
                    "running? Start it, or use --wait to give it longer.")
            time.sleep(0.2)


def pending_changes(conn: psycopg.Connection, config: Config, upto: str) -> int:
    """Messages of the publication the (inactive) slot holds up to `upto`, not consuming."""
    return conn.execute(
        "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, %s::pg_lsn, NULL, "
        "'proto_version', '1', 'publication_names', %s, 'messages', 'true')",
        (config.source.slot, upto, config.source.publication)).fetchone()[0]


def check_silver_current(config: Config, tables: Sequence[str]) -> None:
    """Silver must have applied every bronze row of these tables (changes, and backfill
    watermarks naming them), or the comparison would show stale rows. Read as silver's
    scan reads bronze (bronze_summary: the log's statistics and pyarrow, no Spark job)."""
    lake = Lake.from_config(config)
    if not lake.bronze_changes.exists():
        raise NotCaughtUp("bronze is empty: run `lakehouse ingest` (and a backfill) first")
    progress = read_progress(lake.silver_progress)
    bounds = {table: progress.of(table).position for table in tables}
    stale = set()
    for summary in summarize(lake.bronze_changes, bounds, progress.scanned, tables):
        if summary.schema_name is not None:
            stale.add(f"{summary.schema_name}.{summary.table_name}")
        for control in summary.controls:
            if control.op == OP_MESSAGE:
                mark = parse_watermark(bytes(control.content), control.position)
                if mark.table in bounds and control.position > bounds[mark.table]:
                    stale.add(mark.table)
    if stale:
        raise NotCaughtUp(f"silver has not applied all of bronze for {', '.join(sorted(stale))}:"
                          " run `lakehouse silver` (or wait for the running silver job)")


def source_snapshot(spark: SparkSession, conn: psycopg.Connection, table: str,
                    publication: str, scratch: Scratch) -> tuple[DataFrame, list[SourceColumn]]:
    """The source table as typed columns, read in the connection's open snapshot.

    Its text values go to Parquet files in `scratch` (one per keyset chunk; an empty
    table still writes one), which the returned DataFrame reads.
    """
    shape = table_shape(conn, table, publication)
    after, part, limit = None, 0, FIRST_CHUNK_ROWS
    while part == 0 or after is not None:
        data, rows, last = copy_out(conn, chunk_statement(shape, after, limit))
        text = parse_csv(data, len(shape.columns)).rename_columns(list(shape.columns))
        scratch.write(f"part-{part:05d}.parquet", text)
        after = row_key(shape, last) if rows == limit else None
        limit = next_chunk_rows(rows, len(data), CHUNK_ROWS, CHUNK_BYTES)
        part += 1
    columns = [SourceColumn(name, type_name, type_mod, name in shape.key_columns)
               for name, type_name, type_mod in zip(shape.columns, shape.type_names,
                                                    shape.type_mods)]
    text_rows = spark.read.parquet(scratch.uri)
    return typed_columns(text_rows, columns, table=table), columns


@dataclass(frozen=True)
class Scratch:
    """A directory under the lake for one verify run's source files: written by this
    process, read by Spark (on a cluster its executors read them from the store)."""

    lake: Lake
    prefix: str

    @property
    def uri(self) -> str:
        return self.lake.uri(self.prefix)

    def child(self, name: str) -> "Scratch":
        return Scratch(self.lake, f"{self.prefix}/{name}")

    def write(self, name: str, table: pa.Table) -> None:
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer)
        self.lake.put(f"{self.prefix}/{name}", buffer.getvalue().to_pybytes())


@contextmanager
def scratch_directory(config: Config) -> Iterator[Scratch]:
    """A directory under the lake for one verify run's source files, removed afterwards
    (with any a killed run left more than a day ago)."""
    lake = Lake.from_config(config)
    root = "_state/verify"
    lake.delete_tree(root, datetime.now(timezone.utc) - timedelta(seconds=STALE_SCRATCH_SECONDS))
    scratch = Scratch(lake, f"{root}/{uuid.uuid4().hex}")
    try:
        yield scratch
    finally:
        lake.delete_tree(scratch.prefix)


KINDS = ("missing", "extra", "different")


def compared(source: DataFrame, silver: DataFrame, keys: Sequence[str],
             columns: Sequence[str]) -> DataFrame:
    """Every key of either side, once: its kind (missing, extra, different, or null when
    equal) and the key as text."""
    s, t = source.alias("s"), silver.alias("t")
    on = [F.col(f"s.`{k}`") == F.col(f"t.`{k}`") for k in keys]
    joined = s.join(t, on=on, how="full_outer")
    missing = _all_null("t", keys)
    extra = _all_null("s", keys)
    changed = None
    for name in columns:
        differs = ~F.col(f"s.`{name}`").eqNullSafe(F.col(f"t.`{name}`"))
        changed = differs if changed is None else changed | differs
    kind = (F.when(missing, F.lit("missing")).when(extra, F.lit("extra"))
            .when(changed, F.lit("different")))
    key = F.concat_ws(", ", *(F.coalesce(F.col(f"s.`{k}`"), F.col(f"t.`{k}`")).cast("string")
                              for k in keys))
    return joined.select(kind.alias("kind"), key.alias("key"))


def differences(source: DataFrame, silver: DataFrame, keys: Sequence[str],
                columns: Sequence[str]) -> DataFrame:
    """(kind, key) of every key that is missing, extra or different in silver."""
    return _found(compared(source, silver, keys, columns))


def _found(keys: DataFrame) -> DataFrame:
    """The keys of `compared` that differ."""
    return keys.where(F.col("kind").isNotNull())


def _all_null(alias: str, keys: Sequence[str]) -> Column:
    condition = None
    for k in keys:
        test = F.col(f"{alias}.`{k}`").isNull()
        condition = test if condition is None else condition & test
    return condition


def compare_table(spark: SparkSession, config: Config, table: str,
                  snapshot: tuple[DataFrame, list[SourceColumn]], sample: int) -> TableDiff:
    """Silver's table, and its history's current rows, against the source's `snapshot`."""
    source, columns = snapshot
    names = [c.name for c in columns]
    keys = [c.name for c in columns if c.is_key]
    silver_table = TableNames.from_config(config).silver(*split_table(table))
    if table_exists(spark, silver_table):
        silver = read_table(spark, silver_table)
        silver = silver.select(*(F.col(f"`{c}`") if c in silver.columns
                                 else F.lit(None).alias(c) for c in names))
    else:
        silver = source.limit(0)
    rows, counts, examples = _tally(compared(source, silver, keys, names), sample)
    history = history_examples = None
    history_table = TableNames.from_config(config).history(*split_table(table))
    if config.silver.keeps_history(table) and table_exists(spark, history_table):
        # silver is the reference here: a difference of silver's own shows above
        current = read_table(spark, history_table).filter(F.col(IS_CURRENT))
        current = current.select(*(F.col(f"`{c}`") if c in current.columns
                                   else F.lit(None).alias(c) for c in names))
        _, history, history_examples = _tally(compared(silver, current, keys, names), sample)
    return TableDiff(table, rows - counts.get("extra", 0), rows - counts.get("missing", 0),
                     counts, examples, history, history_examples or {})


def _tally(keys: DataFrame, sample: int) -> tuple[int, dict[str, int], dict[str, list[str]]]:
    """The keys of both sides, the count of each kind of difference found (one action),
    and the first `sample` keys of each kind (a second action, only when there are some)."""
    [found] = keys.agg(F.count(F.lit(1)).alias("rows"), *(
        F.count(F.when(F.col("kind") == kind, True)).alias(kind) for kind in KINDS)).collect()
    counts = {kind: found[kind] for kind in KINDS if found[kind]}
    examples: dict[str, list[str]] = {}
    if counts:
        for row in _found(keys).orderBy("kind", "key").limit(sample * 3).collect():
            bucket = examples.setdefault(row["kind"], [])
            if len(bucket) < sample:
                bucket.append(row["key"])
    return found["rows"], counts, examples


def run_verify(config: Config, spark: SparkSession, tables: Sequence[str] | None = None,
               sample: int = 10, wait_seconds: float = 30.0) -> list[TableDiff]:
    """Compare the tables in scope (default: every configured table)."""
    wait_for_ingest(config, wait_seconds)
    with connect(with_text_format(config.source.dsn)) as conn:
        scope = list(dict.fromkeys(configured_tables(config, tables)
                                   or resolve_tables(conn, "*")))
        check_silver_current(config, scope)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        with scratch_directory(config) as scratch:
            snapshots = [source_snapshot(spark, conn, table, config.source.publication,
                                         scratch.child(f"{i:04d}"))
                         for i, table in enumerate(scope)]
            conn.rollback()  # every table's rows are in scratch: the snapshot may go
            return map_in_threads(
                spark, lambda pair: compare_table(spark, config, *pair, sample),
                list(zip(scope, snapshots)), config.silver.parallel_tables, "verify")


def _kinds(counts: dict[str, int], examples: dict[str, list[str]], indent: str) -> list[str]:
    return [f"{indent}{kind}: {counts[kind]} key(s), e.g. {'; '.join(examples.get(kind, []))}"
            for kind in ("missing", "extra", "different") if counts.get(kind)]


def format_diffs(diffs: Sequence[TableDiff]) -> str:
    lines = []
    for diff in diffs:
        status = "equal" if diff.equal else "DIFFERENT"
        lines.append(f"{diff.table}: {status} (source {diff.source_rows} rows, silver "
                     f"{diff.silver_rows} rows)")
        lines += _kinds(diff.counts, diff.examples, "  ")
        if any(diff.counts.values()):
            lines.append(f"  repair: lakehouse backfill --resync {diff.table}")
        if diff.history is None:
            continue
        if not any(diff.history.values()):
            lines.append("  history: its current rows equal silver")
            continue
        lines.append("  history: its current rows differ from silver")
        lines += _kinds(diff.history, diff.history_examples, "    ")
        lines.append(f"    repair: lakehouse silver --rebuild {diff.table}")
    return "\n".join(lines)
