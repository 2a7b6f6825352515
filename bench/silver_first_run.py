"""The first silver run after a large backfill: seconds and peak RSS per max_batch_rows.

A narrow table of `--rows` rows (`id int8` key, `text`, `numeric`, `timestamptz`) is
loaded, backfilled with `lakehouse backfill` and its watermarks ingested. Then, for each
`--max-batch-rows` value, a copy of that bronze gets its first `lakehouse silver` in a
child process (wall seconds, the child's peak RSS from wait4), and `lakehouse verify`
must find silver equal to the source. Values at or above the row count apply the
backlog in one batch; smaller ones in slices (docs/silver.md, Large backlogs).

    python -m bench.silver_first_run [--rows 10000000] [--max-batch-rows 100000000 2000000]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg

from bench.backfill_bench import load_table
from bench.common import embedded_server, lakehouse, table, write_config
from pipelines.config import SourceConfig
from pipelines.source.setup import run_setup


def run(rows: int, limits: list[int]) -> list[list[str]]:
    out = []
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        dsn, work = server.dsn(), Path(work)
        load_table(dsn, "narrow", rows)
        run_setup(SourceConfig(dsn, tables=("public.bench",)))
        base = write_config(work / "base.yml", dsn, work / "lake")
        backfill = lakehouse(base, "backfill", stdout=subprocess.DEVNULL)
        with psycopg.connect(dsn, autocommit=True) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        lakehouse(base, "ingest", "--until-lsn", lsn)  # the watermarks reach bronze
        print(f"{rows:,} rows backfilled in {backfill.seconds:.1f} s", file=sys.stderr)
        for limit in limits:
            lake = work / f"lake-{limit}"
            shutil.copytree(work / "lake" / "bronze", lake / "bronze")
            config = write_config(work / f"silver-{limit}.yml", dsn, lake,
                                  silver={"max_batch_rows": limit})
            silver = lakehouse(config, "silver", stdout=subprocess.DEVNULL)
            lakehouse(config, "verify", stdout=subprocess.DEVNULL)  # exit 0: equal
            slices = -(-rows // limit) if limit < rows else 1
            out.append([f"{rows:,}", f"{limit:,}", f"~{slices}", f"{silver.seconds:.1f}",
                        f"{silver.peak_rss_mb:,.0f}", "equal"])
            shutil.rmtree(lake)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--max-batch-rows", type=int, nargs="+", default=[100_000_000, 2_000_000])
    args = parser.parse_args()
    rows = [["table rows", "max_batch_rows", "slices", "first silver s", "peak RSS MB",
             "verify"]]
    print(table(rows + run(args.rows, args.max_batch_rows)))


if __name__ == "__main__":
    main()
