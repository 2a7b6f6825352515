"""Backfill throughput vs `COPY (SELECT ...) TO STDOUT` of the same table, and peak RSS.

For each table shape a 1M-row table is loaded before the slot exists; then, in the same
run, the same table is read with COPY TO STDOUT twice (psql's \\copy to /dev/null: the
C client; a psycopg loop that keeps nothing: the client the backfill uses) and backfilled
with `lakehouse backfill` in a child process. Backfill rows/s counts the table's own
time (state started_at -> finished_at: watermarks, SELECTs, bronze commits, cursor
writes); the process column adds interpreter start-up. Peak RSS is the child's
(wait4 ru_maxrss).

    python -m bench.backfill_bench [--rows 1000000] [--chunk-size 20000 50000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import yaml

from bench.common import embedded_server, table, timed
from pipelines.backfill.state import StateStore
from pipelines.config import SourceConfig
from pipelines.embedded_pg import bin_dir
from pipelines.lake import LakeLayout
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


def run(shape: str, rows: int, chunk_sizes: list[int]) -> list[list[str]]:
    columns, fill = SHAPES[shape]
    out = []
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TYPE entry_source AS ENUM ('timer', 'manual', 'import')")
            conn.execute(f"CREATE TABLE bench ({columns})")
            conn.execute(f"INSERT INTO bench {fill.format(n=rows)}")
            conn.execute("VACUUM ANALYZE bench")
            size = conn.execute("SELECT pg_size_pretty(pg_table_size('bench'))").fetchone()[0]
        run_setup(SourceConfig(dsn, tables=("public.bench",)))
        copy_with_psycopg(dsn)  # warm the cache: every reader below finds the table in memory

        psql = timed([str(bin_dir() / "psql"), "-X", "-q", "-d", with_text_format(dsn), "-c",
                      r"\copy (SELECT * FROM bench) TO '/dev/null'"])
        copy_rate = rows / psql.seconds
        psycopg_rate = rows / copy_with_psycopg(dsn)
        out.append([f"{shape} ({size})", "COPY TO STDOUT, psql", f"{copy_rate:,.0f}", "1.00",
                    f"{psql.seconds:.2f}", f"{psql.peak_rss_mb:.0f}"])
        out.append([f"{shape} ({size})", "COPY TO STDOUT, psycopg", f"{psycopg_rate:,.0f}",
                    f"{psycopg_rate / copy_rate:.2f}", f"{rows / psycopg_rate:.2f}", "-"])

        for chunk_size in chunk_sizes:
            lake = Path(work) / f"lake-{chunk_size}"
            config = Path(work) / f"lakehouse-{chunk_size}.yml"
            config.write_text(yaml.safe_dump({"source": {"dsn": dsn, "tables": ["public.bench"]},
                                              "lake": {"path": str(lake)}}))
            child = timed([sys.executable, "-m", "pipelines.cli", "--config", str(config), "-q",
                           "backfill", "--chunk-size", str(chunk_size), "--restart"],
                          stdout=subprocess.DEVNULL)
            if child.returncode != 0:
                raise SystemExit(f"backfill failed with exit code {child.returncode}")
            [state] = StateStore(LakeLayout(lake).state("backfills")).all()
            assert state.rows_done == rows, state
            seconds = (state.finished_at - state.started_at).total_seconds()
            out.append([f"{shape} ({size})", f"backfill, chunks of {chunk_size:,}",
                        f"{rows / seconds:,.0f}", f"{rows / seconds / copy_rate:.2f}",
                        f"{seconds:.2f} ({child.seconds:.2f} process)",
                        f"{child.peak_rss_mb:.0f}"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, nargs="+", default=[20_000, 50_000])
    parser.add_argument("--shape", choices=sorted(SHAPES), nargs="+", default=["narrow", "wide"])
    args = parser.parse_args()
    rows = [["table", "reader", "rows/s", "vs psql COPY", "seconds", "peak RSS MB"]]
    for shape in args.shape:
        rows += run(shape, args.rows, args.chunk_size)
    print(table(rows))


if __name__ == "__main__":
    main()
