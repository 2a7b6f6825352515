"""Commit time as a Delta log grows, with Delta's default log retention and with a short one.

The ingest appends to bronze/changes up to once a second, for days. On a local file
system each delta-rs commit lists the whole _delta_log directory, so without log
cleanup a commit slows down with every commit before it. This appends one small batch
`--commits` times to two tables through one open DeltaTable each (as the ingest does):
one with Delta's default retention (30 days: nothing is deleted), one whose retention
has passed (`--retention-seconds`, standing in for pipelines.lake.LOG_RETENTION's 10
minutes of a pipeline that has run longer), and prints ms per append and log files at
intervals.

    python -m bench.delta_log_bench [--commits 5000] [--retention-seconds 1]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from bench.common import table


def append_times(path: Path, commits: int, every: int,
                 configuration: dict[str, str] | None) -> list[tuple[int, float, int]]:
    """(commits so far, ms per append over the last `every`, log entries) at intervals."""
    batch = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
    DeltaTable.create(str(path), schema=batch.schema, configuration=configuration)
    delta = DeltaTable(str(path))
    out, started = [], time.perf_counter()
    for n in range(1, commits + 1):
        write_deltalake(delta, batch, mode="append")
        if n % every == 0:
            elapsed = time.perf_counter() - started
            out.append((n, elapsed / every * 1000, len(os.listdir(path / "_delta_log"))))
            started = time.perf_counter()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=5000)
    parser.add_argument("--retention-seconds", type=int, default=1)
    args = parser.parse_args()
    every = max(1, args.commits // 5)
    with tempfile.TemporaryDirectory() as work:
        default = append_times(Path(work) / "default", args.commits, every, None)
        short = append_times(
            Path(work) / "short", args.commits, every,
            {"delta.logRetentionDuration": f"interval {args.retention_seconds} seconds"})
    rows = [["commits", "default: ms/append", "log files", "short retention: ms/append",
             "log files"]]
    for (n, ms, files), (_, short_ms, short_files) in zip(default, short):
        rows.append([f"{n:,}", f"{ms:.1f}", f"{files:,}", f"{short_ms:.1f}", f"{short_files:,}"])
    print(table(rows))


if __name__ == "__main__":
    main()
