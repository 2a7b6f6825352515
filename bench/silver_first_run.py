"""The first silver run after a large backfill: seconds and peak RSS per max_batch_rows.

A narrow table of `--rows` rows (`id int8` key, `text`, `numeric`, `timestamptz`) is
loaded once. Each of `--repeat` rounds backfills it into a new lake with `lakehouse
backfill` (timed: the limit the first silver run is measured against) and ingests its
watermarks; then, for each `--max-batch-rows` value, a copy of that bronze gets its
first `lakehouse silver` in a child process (wall seconds, the child's peak RSS from
wait4), and `lakehouse verify` must find silver equal to the source. The slices are the
versions of the progress table the run wrote (docs/silver.md, Large backlogs). The
backfill and the silver runs alternate, so each ratio compares runs of one round.

    python -m bench.silver_first_run [--rows 10000000] [--max-batch-rows 100000000 2000000]
        [--repeat 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from deltalake import DeltaTable

from bench.backfill_bench import load_table
from bench.common import current_lsn, embedded_server, lakehouse, table, write_config
from pipelines.config import SourceConfig
from pipelines.source.setup import run_setup


def backfilled(dsn: str, lake: Path, config: Path, slot: str) -> float:
    """Backfill the table into a new lake, fed by a new slot, and land its watermarks:
    the backfill's seconds."""
    shutil.rmtree(lake, ignore_errors=True)
    run_setup(SourceConfig(dsn, tables=("public.bench",), slot=slot))
    write_config(config, dsn, lake, slot)
    backfill = lakehouse(config, "backfill", "--restart", stdout=subprocess.DEVNULL)
    lakehouse(config, "ingest", "--until-lsn", current_lsn(dsn))  # the watermarks land
    return backfill.seconds


def run(rows: int, limits: list[int], repeat: int) -> list[list[str]]:
    out, ratios = [], {limit: [] for limit in limits}
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        dsn, work = server.dsn(), Path(work)
        load_table(dsn, "narrow", rows)
        for round_ in range(1, repeat + 1):
            slot = f"bench_first_run_{round_}"
            seconds = backfilled(dsn, work / "lake", work / "base.yml", slot)
            for limit in limits:
                lake = work / f"lake-{limit}"
                shutil.copytree(work / "lake" / "bronze", lake / "bronze")
                config = write_config(work / f"silver-{limit}.yml", dsn, lake, slot,
                                      silver={"max_batch_rows": limit})
                silver = lakehouse(config, "silver", stdout=subprocess.DEVNULL)
                lakehouse(config, "verify", stdout=subprocess.DEVNULL)  # exit 0: equal
                slices = DeltaTable(str(lake / "_state" / "silver_progress")).version() + 1
                ratio = silver.seconds / seconds
                ratios[limit].append(ratio)
                out.append([str(round_), f"{rows:,}", f"{limit:,}", str(slices),
                            f"{seconds:.1f}", f"{silver.seconds:.1f}", f"{ratio:.2f}x",
                            f"{silver.peak_rss_mb:,.0f}", "equal"])
                shutil.rmtree(lake)
    for limit, values in ratios.items():
        print(f"max_batch_rows {limit:,}: median {statistics.median(values):.2f}x the "
              "backfill", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--max-batch-rows", type=int, nargs="+", default=[100_000_000, 2_000_000])
    parser.add_argument("--repeat", type=int, default=2, help="rounds of backfill and runs")
    args = parser.parse_args()
    rows = [["round", "table rows", "max_batch_rows", "slices", "backfill s",
             "first silver s", "ratio", "peak RSS MB", "verify"]]
    print(table(rows + run(args.rows, args.max_batch_rows, args.repeat)))


if __name__ == "__main__":
    main()
