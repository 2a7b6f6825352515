"""An in-place recovery of a lost slot: recover, resync, catch-up and silver, vs COPY.

A narrow table of `--rows` rows (bench.backfill_bench's "narrow" shape) is set up,
backfilled, ingested and applied to silver on Sail, all in this process. Then the slot
is dropped and, while no slot captures them, 1% of the rows are deleted and 1% updated.
The recovery an operator runs is timed step by step: `run_recover` (a new slot
generation, a resync scheduled), `run_backfill` of the scheduled resync, the ingest
catch-up to the WAL position after it (the resync's watermarks), and the silver run
that applies the resync (deleting the rows the gap deleted); then `run_verify` must
find silver equal to the source (not in the total).

The limit is psql's `COPY (SELECT * FROM bench) TO STDOUT` of the same table
(bench.backfill_bench). `--repeat` pairs alternate a COPY and a resync, so both see
about the same machine load: the first pair's resync is the recovery's, later ones are
`run_backfill(..., BackfillOptions(tables=("public.bench",), resync=True))`. The table
reports medians and the range of the per-pair ratios (each pair is also printed as it
ends, with the load average). The ingest runs after the resync, not beside it. Peak
RSS is this process's (Python and the in-process Sail server) during the step: VmHWM,
reset before the step. None for psql: wait4 would report this process's, which it
forks from (bench.silver_bench.child).

    python -m bench.recover_bench [--rows 1000000] [--chunk-size 50000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Iterator

import psycopg

from bench.backfill_bench import copy_with_psql, copy_with_psycopg, load_table
from bench.common import embedded_server, table, write_config
from bench.silver_bench import vm_hwm_mb
from pipelines.backfill.runner import BackfillOptions, TableResult, run_backfill
from pipelines.config import Config, load_config
from pipelines.engine import get_spark
from pipelines.positions import parse_lsn
from pipelines.ingest.run import IngestOptions, IngestReport, StopRequested, run_ingest
from pipelines.lake import Lake
from pipelines.recover.run import run_recover
from pipelines.silver.job import run_silver
from pipelines.source.setup import run_setup
from pipelines.verify.run import format_diffs, run_verify

TABLE = "public.bench"
GAP_CHANGES = ("DELETE FROM bench WHERE id % 100 = 0",
               "UPDATE bench SET v = 'changed in the gap', n = n + 1 WHERE id % 100 = 1")


@dataclass
class Step:
    """A timed step: wall seconds and this process's peak RSS during it."""

    seconds: float = 0.0
    peak_rss_mb: float = 0.0


@contextmanager
def step() -> Iterator[Step]:
    """Time the block; the peak RSS is VmHWM, reset to the current RSS at its start."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    out = Step()
    started = time.perf_counter()
    yield out
    out.seconds = time.perf_counter() - started
    out.peak_rss_mb = vm_hwm_mb()


def resync(config: Config, options: BackfillOptions, rows: int) -> tuple[Step, TableResult]:
    """One resync backfill of the table, timed; it must read every row of it."""
    with step() as timed:
        [result] = run_backfill(config, options)
    if result.status != "done" or result.rows != rows:
        raise SystemExit(f"resync of {TABLE}: {result.status}, {result.rows:,} of {rows:,} "
                         f"rows ({result.error})")
    return timed, result


def catch_up(config: Config) -> IngestReport:
    """Ingest until bronze holds everything the source has committed."""
    with psycopg.connect(config.source.dsn) as conn:
        target = parse_lsn(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
    return run_ingest(config, IngestOptions(until_lsn=target), StopRequested())


def rest_of_recovery(config: Config, spark) -> tuple[Step, int, Step, Step, int]:
    """After the resync: the ingest catch-up (and the changes it landed), silver, and the
    check that silver equals the source (and its row count)."""
    with step() as ingest:
        caught_up = catch_up(config)
    with step() as silver:
        applied = run_silver(config, spark)
    if applied.failed:
        raise SystemExit(f"silver failed: {applied.failed}")
    with step() as verify:
        diffs = run_verify(config, spark)
    if not all(d.equal for d in diffs):
        raise SystemExit(f"silver differs from the source:\n{format_diffs(diffs)}")
    return ingest, caught_up.changes, silver, verify, diffs[0].silver_rows


def build(config: Config, spark) -> int:
    """Setup, first backfill, ingest until idle and silver: the lake before the loss.
    Returns silver's row count."""
    started = time.perf_counter()
    run_setup(config.source, Lake.from_config(config))
    [backfill] = run_backfill(config, BackfillOptions(chunk_size=config.backfill.chunk_size))
    run_ingest(config, IngestOptions(until_idle=1.0), StopRequested())
    with step() as silver:
        report = run_silver(config, spark)
    if report.failed:
        raise SystemExit(f"first silver run failed: {report.failed}")
    print(f"lake built in {time.perf_counter() - started:.1f} s (backfill {backfill.seconds:.1f} "
          f"s, first silver {silver.seconds:.1f} s)", file=sys.stderr)
    return silver_rows(config, spark)


def silver_rows(config: Config, spark) -> int:
    path = Lake.from_config(config).silver(*TABLE.split("."))
    return spark.read.format("delta").load(path.uri).count()


def lose_slot(dsn: str, slot: str) -> None:
    """Drop the (idle) slot, then change rows no slot captures."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        for statement in GAP_CHANGES:
            changed = conn.execute(statement).rowcount
            print(f"gap: {statement.split()[0].lower()} {changed:,} rows", file=sys.stderr)


def source_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM bench").fetchone()[0]


def run(rows: int, chunk_size: int, repeat: int) -> list[list[str]]:
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        dsn, work = server.dsn(), Path(work)
        size = load_table(dsn, "narrow", rows)
        print(f"{TABLE}: {rows:,} rows, {size}", file=sys.stderr)
        config = load_config(write_config(work / "lakehouse.yml", dsn, work / "lake",
                                          backfill={"chunk_size": chunk_size}), environ={})
        spark = get_spark(config)
        before = build(config, spark)
        lose_slot(dsn, config.source.slot)
        left = source_rows(dsn)
        copy_with_psycopg(dsn)  # warm the cache: every reader below finds the table in memory
        psycopg_seconds = copy_with_psycopg(dsn)

        with step() as recover:
            report = run_recover(config)
        if report.problem is None or report.generation.resync_tables != (TABLE,):
            raise SystemExit(f"recover found nothing to do: {report}")
        copies, resyncs = [], []
        for i in range(repeat):
            copies.append(copy_with_psql(dsn))
            options = (BackfillOptions(chunk_size=chunk_size) if i == 0  # the scheduled one
                       else BackfillOptions(tables=(TABLE,), chunk_size=chunk_size, resync=True))
            resyncs.append(resync(config, options, left))
            copy_s, (resync_s, result) = copies[-1].seconds, resyncs[-1]
            print(f"pair {i + 1}: COPY {copy_s:.2f} s, resync {resync_s.seconds:.2f} s (the "
                  f"table's own {result.seconds:.2f} s), {copy_s / resync_s.seconds:.2f}x, "
                  f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}",
                  file=sys.stderr)
            if i == 0:
                ingest, changes, silver, verify, after = rest_of_recovery(config, spark)

    first = resyncs[0][0]
    recovery = [recover, first, ingest, silver]
    copy_seconds = median(c.seconds for c in copies)
    resync_seconds = median(r.seconds for r, _ in resyncs)
    ratios = sorted(c.seconds / r.seconds for c, (r, _) in zip(copies, resyncs))
    return [
        ["COPY TO STDOUT, psycopg", f"{left:,}", f"{psycopg_seconds:.2f}",
         f"{left / psycopg_seconds:,.0f}", "-", "-"],
        [f"COPY TO STDOUT, psql (median of {repeat})", f"{left:,}", f"{copy_seconds:.2f}",
         f"{left / copy_seconds:,.0f}", "1.00", "-"],
        [f"resync (median of {repeat})", f"{left:,}", f"{resync_seconds:.2f}",
         f"{left / resync_seconds:,.0f}", f"{median(ratios):.2f} ({ratios[0]:.2f}-"
         f"{ratios[-1]:.2f})", f"{max(r.peak_rss_mb for r, _ in resyncs):,.0f}"],
        ["recovery: recover", "-", f"{recover.seconds:.2f}", "-", "-",
         f"{recover.peak_rss_mb:,.0f}"],
        ["recovery: resync", f"{left:,}", f"{first.seconds:.2f}", f"{left / first.seconds:,.0f}",
         f"{copies[0].seconds / first.seconds:.2f}", f"{first.peak_rss_mb:,.0f}"],
        ["recovery: ingest catch-up", f"{changes:,}", f"{ingest.seconds:.2f}", "-",
         "-", f"{ingest.peak_rss_mb:,.0f}"],
        ["recovery: silver on Sail", f"{left:,}", f"{silver.seconds:.2f}",
         f"{left / silver.seconds:,.0f}", "-", f"{silver.peak_rss_mb:,.0f}"],
        ["recovery: total", f"{left:,}", f"{sum(s.seconds for s in recovery):.2f}",
         f"{left / sum(s.seconds for s in recovery):,.0f}", "-",
         f"{max(s.peak_rss_mb for s in recovery):,.0f}"],
        [f"verify: silver = source ({before - after:,} rows deleted)", f"{after:,}",
         f"{verify.seconds:.2f}", "-", "-", f"{verify.peak_rss_mb:,.0f}"],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=2,
                        help="(COPY, resync) pairs, alternating (medians); the first resync "
                        "is the recovery's")
    args = parser.parse_args()
    if args.repeat < 1:
        raise SystemExit("--repeat: expected a positive number")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("RUST_LOG", "error")  # the in-process Sail server's log
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the start",
          file=sys.stderr)
    rows = [["step", "rows", "seconds", "rows/s", "vs psql COPY (range)", "peak RSS MB"]]
    print(table(rows + run(args.rows, args.chunk_size, args.repeat)))


if __name__ == "__main__":
    main()
