"""Backfill throughput vs `COPY (SELECT ...) TO STDOUT` of the same table, and peak RSS.

For each table shape a 1M-row table is loaded (vacuumed, analyzed: the wide table's
random uuid key is then read by key range, and checkpointed) before the slot exists.
A psycopg COPY loop that keeps nothing shows the client the backfill uses. Then, per
chunk size, `--repeat` pairs alternate psql's \\copy to /dev/null (the C client: the
limit) and `lakehouse backfill` in a child process, so both see about the same machine
load; the table reports medians and the range of the per-pair ratios (each pair is also
printed as it ends). Backfill seconds are the table's own time (state started_at ->
finished_at: watermarks, SELECTs, bronze commits, cursor writes), without interpreter
start-up. Peak RSS is the child's (wait4 ru_maxrss), the highest of its runs.

    python -m bench.backfill_bench [--rows 1000000] [--chunk-size 20000 50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import psycopg

from bench.common import Run, embedded_server, lakehouse, table, timed, write_config
from pipelines.backfill.state import StateStore
from pipelines.config import SourceConfig
from pipelines.embedded_pg import bin_dir
from pipelines.lake import Lake
from pipelines.source.setup import run_setup
from pipelines.source.text_format import with_text_format

SHAPES = {
    # four columns, as in the ingest benchmark
    "narrow": ("id bigint PRIMARY KEY, v text, n numeric, at timestamptz",
               "SELECT g, md5(g::text), g * 1.5, now() - g * interval '1 second' "
               "FROM generate_series(1, {n}) g"),
    # the demo's time_entries: uuid key, 11 columns, arrays, enum, jsonb, ~180 B/row
    "wide": ("id uuid PRIMARY KEY, user_id bigint NOT NULL, project_id int NOT NULL, "
             "started_at timestamptz NOT NULL, stopped_at timestamptz, duration interval, "
             "description text, tags text[] NOT NULL, billable numeric(10,2), "
             "source entry_source, metadata jsonb",
             "SELECT gen_random_uuid(), g % 1000, g % 50, now() - g * interval '1 minute', "
             "now(), (g % 300) * interval '1 minute', CASE WHEN g % 7 = 0 THEN NULL "
             "ELSE 'fixed the \"export\", again ' || g END, ARRAY['meeting', 'ops'], "
             "(g % 30000) / 100.0, 'manual', '{{\"device\": \"web\"}}' "
             "FROM generate_series(1, {n}) g"),
}


def copy_with_psycopg(dsn: str) -> float:
    """Seconds to read the whole table with COPY TO STDOUT through psycopg, keeping nothing."""
    with psycopg.connect(with_text_format(dsn), autocommit=True) as conn, conn.cursor() as cur:
        started = time.perf_counter()
        with cur.copy("COPY (SELECT * FROM bench) TO STDOUT") as copy:
            for _ in copy:
                pass
        return time.perf_counter() - started


def run(shape: str, rows: int, chunk_sizes: list[int], repeat: int) -> list[list[str]]:
    """Per chunk size, `repeat` pairs of (psql COPY, backfill), alternating so that both
    see about the same machine load; rates and ratios are medians over the pairs."""
    out = []
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        dsn = server.dsn()
        size = load_table(dsn, shape, rows)
        run_setup(SourceConfig(dsn, tables=("public.bench",)))
        copy_with_psycopg(dsn)  # warm the cache: every reader below finds the table in memory
        label = f"{shape} ({size})"
        psycopg_rate = rows / copy_with_psycopg(dsn)
        out.append([label, "COPY TO STDOUT, psycopg", f"{psycopg_rate:,.0f}", "-", "-", "-"])
        runs = 0
        for chunk_size in chunk_sizes:
            copies, backfills = [], []
            for _ in range(repeat):
                copies.append(copy_with_psql(dsn))
                backfills.append(backfill(dsn, Path(work), runs, chunk_size, rows))
                runs += 1
                print(f"{label}, chunks of {chunk_size:,}: COPY {copies[-1].seconds:.2f} s, "
                      f"backfill {backfills[-1][0]:.2f} s, "
                      f"{copies[-1].seconds / backfills[-1][0]:.2f}x", file=sys.stderr)
            copy_seconds = median(one.seconds for one in copies)
            seconds = median(one for one, _ in backfills)
            ratios = sorted(c.seconds / b for c, (b, _) in zip(copies, backfills))
            out.append([label, "COPY TO STDOUT, psql", f"{rows / copy_seconds:,.0f}", "1.00",
                        f"{copy_seconds:.2f}", f"{max(c.peak_rss_mb for c in copies):.0f}"])
            out.append([label, f"backfill, chunks of {chunk_size:,}", f"{rows / seconds:,.0f}",
                        f"{median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})",
                        f"{seconds:.2f}", f"{max(run.peak_rss_mb for _, run in backfills):.0f}"])
    return out


def load_table(dsn: str, shape: str, rows: int) -> str:
    """Create and fill public.bench in one of SHAPES; returns its size on disk."""
    columns, fill = SHAPES[shape]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TYPE entry_source AS ENUM ('timer', 'manual', 'import')")
        conn.execute(f"CREATE TABLE bench ({columns})")
        conn.execute(f"INSERT INTO bench {fill.format(n=rows)}")
        conn.execute("VACUUM ANALYZE bench")
        conn.execute("CHECKPOINT")  # the load's dirty pages are not written during the runs
        return conn.execute("SELECT pg_size_pretty(pg_table_size('bench'))").fetchone()[0]


def copy_with_psql(dsn: str) -> Run:
    """psql's \\copy of the whole table to /dev/null: the C client's COPY rate."""
    return timed([str(bin_dir() / "psql"), "-X", "-q", "-d", with_text_format(dsn), "-c",
                  r"\copy (SELECT * FROM bench) TO '/dev/null'"])


def backfill(dsn: str, work: Path, number: int, chunk_size: int, rows: int) -> tuple[float, Run]:
    """`lakehouse backfill` of the table into a new lake: the table's own seconds (from
    its state row) and the child process's run."""
    lake = work / f"lake-{number}"
    config = write_config(work / f"lakehouse-{number}.yml", dsn, lake)
    child = lakehouse(config, "backfill", "--chunk-size", str(chunk_size), "--restart",
                      stdout=subprocess.DEVNULL)
    [state] = StateStore(Lake.of(lake).backfills).all()
    assert state.rows_done == rows, state
    return (state.finished_at - state.started_at).total_seconds(), child


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, nargs="+", default=[20_000, 50_000])
    parser.add_argument("--shape", choices=sorted(SHAPES), nargs="+", default=["narrow", "wide"])
    parser.add_argument("--repeat", type=int, default=3,
                        help="(COPY, backfill) pairs per chunk size, alternating (medians)")
    args = parser.parse_args()
    rows = [["table", "reader", "rows/s", "vs psql COPY (range)", "seconds", "peak RSS MB"]]
    for shape in args.shape:
        rows += run(shape, args.rows, args.chunk_size, args.repeat)
    print(table(rows))


if __name__ == "__main__":
    main()
