"""What a long Delta log costs, on local disk and on S3 (MinIO), in the same run.

The ingest appends to bronze/changes up to once a second and silver commits every run,
so a table's log gains thousands of files a day unless its retention
(`lake.log_retention`) lets them go. On a local file system every Delta read and commit
lists the whole _delta_log; an object store lists from an offset (the latest
checkpoint). Four tables, alternating: {local disk, MinIO} x {Delta's default retention
(30 days: nothing expires), a retention that has passed (`--retention-seconds`,
standing in for a short one such as 10 minutes in a pipeline that has run longer)}.

Each table's log is grown to each of `--commits` by writing commit files directly (an
app transaction each, as an ingest commit carries) with a delta-rs checkpoint every 100
versions and, under the short retention, delta-rs's cleanup of the expired files after
it, as delta-rs does when it commits: appending them one by one through delta-rs would
take most of an hour on the local disk. Then, `--repeat` rounds, the tables in turn
(reversed every other round), each:
- append: one delta-rs append of 3 rows through the table kept open (as the ingest does);
- append, no cleanup: the same without delta-rs's expired-log cleanup, which delta-rs 1.6
  runs after every commit and which lists the whole log (on an object store too);
- open: open the table anew (delta-rs: its log from the latest checkpoint);
- read: open it and read its rows (read_delta: delta-rs's log, a pyarrow scan);
- Sail read: the same rows through an embedded Sail session (skip with --no-sail);
- trim_log: what a silver run does to each table it wrote (pipelines.lake.trim_log).
Medians in ms, the ratio long/short, the log files, and the load average around each
commit count's rounds.

MinIO runs on this machine: its listings cost requests and HTTP, not a network's
latency. Read its column as the floor of what a real store adds.

    python -m bench.delta_log_bench [--commits 1000 5000] [--repeat 15]
                                    [--retention-seconds 1] [--places local s3] [--no-sail]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import obstore
import pyarrow as pa
from deltalake import DeltaTable, PostCommitHookProperties, write_deltalake

from bench.common import table
from pipelines import storage
from pipelines.lake import DELTA_LOG, Lake, TableLocation, read_delta, trim_log
from tests.support.object_stores import start_minio

DEFAULT_RETENTION = "interval 30 days"  # Delta's own default
CHECKPOINT_INTERVAL = 100  # delta-rs's default, which every table here keeps
BATCH = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]})
MEASURES = ("append", "append, no cleanup", "open", "read", "Sail read", "trim_log")
NO_CLEANUP = PostCommitHookProperties(cleanup_expired_logs=False)


@dataclass
class Arm:
    """One table: where it is, whether its retention is the short one, what was timed."""

    place: str  # "local" or "s3"
    short: bool
    location: TableLocation
    version: int = 0
    writer: DeltaTable | None = None  # kept open between appends, as the ingest keeps it
    times: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    log_files: dict[int, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.place} {'short' if self.short else 'default'}"

    @property
    def files(self):
        return storage.object_store(self.location.uri, dict(self.location.options))

    def delta(self) -> DeltaTable:
        return DeltaTable(self.location.uri, storage_options=self.location.delta_options)

    def count_log_files(self) -> int:
        return sum(len(batch) for batch in obstore.list(self.files, DELTA_LOG))


def make_arms(work: Path, places: list[str], minio, retention_seconds: int) -> list[Arm]:
    """The tables, created with their retention (the short one as trim_log sets it)."""
    arms = []
    for place in places:
        for short in (False, True):
            retention = f"{retention_seconds} seconds" if short else DEFAULT_RETENTION
            root = (minio.new_lake(f"{place}-{int(short)}") if place == "s3"
                    else work / f"{place}-{int(short)}")
            lake = Lake.of(root, minio.storage_options if place == "s3" else None, retention)
            arm = Arm(place, short, lake.table("t"))
            arm.location.create(BATCH.schema, configuration=arm.location.retention_properties)
            arms.append(arm)
    return arms


def commit_file(version: int) -> bytes:
    """A commit as an ingest batch without rows writes it: its info and its app
    transaction (the slot's progress)."""
    now = int(time.time() * 1000)
    return (json.dumps({"commitInfo": {"timestamp": now, "operation": "WRITE",
                                       "operationParameters": {"mode": "Append"},
                                       "clientVersion": "lakehouse-bench"}}) + "\n"
            + json.dumps({"txn": {"appId": "bench", "version": version,
                                  "lastUpdated": now}}) + "\n").encode()


def grow(arm: Arm, upto: int, pool: ThreadPoolExecutor) -> None:
    """Commits up to version `upto`, a checkpoint at every 100th (and the short arm's
    cleanup after it), as delta-rs would have written them."""
    files = arm.files
    while arm.version < upto:
        end = min(upto, (arm.version // CHECKPOINT_INTERVAL + 1) * CHECKPOINT_INTERVAL)
        list(pool.map(lambda v: obstore.put(files, f"{DELTA_LOG}/{v:020d}.json",
                                            commit_file(v), mode="create"),
                      range(arm.version + 1, end + 1)))
        arm.version = end
        if end % CHECKPOINT_INTERVAL == 0:
            delta = arm.delta()
            delta.create_checkpoint()
            if arm.short:
                delta.cleanup_metadata()
    arm.writer = arm.delta()


def expire(arms: list[Arm], retention_seconds: int) -> None:
    """Once the short retention has passed: what the short arms' next checkpoint deletes."""
    time.sleep(retention_seconds + 0.5)
    for arm in arms:
        if arm.short:
            arm.delta().cleanup_metadata()


def measure_round(arm: Arm, commits: int, spark) -> None:
    """One of each measure on the arm's table (ms)."""
    def timed(measure: str, action) -> None:
        started = time.perf_counter()
        action()
        arm.times.setdefault((commits, measure), []).append(
            (time.perf_counter() - started) * 1000)

    timed("append", lambda: write_deltalake(arm.writer, BATCH, mode="append"))
    timed("append, no cleanup", lambda: write_deltalake(arm.writer, BATCH, mode="append",
                                                        post_commithook_properties=NO_CLEANUP))
    arm.version += 2
    timed("open", lambda: arm.delta().version())
    timed("read", lambda: read_delta(arm.location))
    if spark is not None:
        timed("Sail read", lambda: spark.read.format("delta").load(arm.location.uri).collect())
    timed("trim_log", lambda: trim_log(arm.location))


def sail_session(work: Path, minio):
    """An embedded Sail session that reaches MinIO, set up as get_spark sets it up."""
    from pipelines.engine import start_local_session

    if minio is not None:
        os.environ.update(storage.sail_environment("s3", minio.storage_options))
    return start_local_session(work / "warehouse")


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def run(args: argparse.Namespace, work: Path, minio) -> tuple[list[list[str]], list[str]]:
    """The report's rows, and the load average around each commit count's rounds."""
    arms = make_arms(work, args.places, minio, args.retention_seconds)
    spark = None if args.no_sail else sail_session(work, minio)
    loads = []
    with ThreadPoolExecutor(8) as pool:
        for commits in sorted(args.commits):
            started, at_start = time.perf_counter(), load()
            for arm in arms:
                grow(arm, commits, pool)
            expire(arms, args.retention_seconds)
            for arm in arms:
                arm.log_files[commits] = arm.count_log_files()
            print(f"{commits:,} commits: logs built in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
            for i in range(args.repeat):
                for arm in arms if i % 2 == 0 else reversed(arms):
                    measure_round(arm, commits, spark)
            loads.append(f"{commits:,} commits: load average {at_start} before, "
                         f"{load()} after")
            print(loads[-1], file=sys.stderr)
    return report(arms, sorted(args.commits), spark is not None), loads


def report(arms: list[Arm], levels: list[int], sail: bool) -> list[list[str]]:
    """Per commit count, measure and place: medians short and default, and their ratio."""
    rows = [["commits", "measure", "place", "short: ms", "default: ms", "default/short"]]
    by = {(arm.place, arm.short): arm for arm in arms}
    places = list(dict.fromkeys(arm.place for arm in arms))
    for commits in levels:
        for place in places:
            rows.append([f"{commits:,}", "log files", place,
                         f"{by[place, True].log_files[commits]:,}",
                         f"{by[place, False].log_files[commits]:,}", ""])
        for measure in MEASURES if sail else [m for m in MEASURES if m != "Sail read"]:
            for place in places:
                short = median(by[place, True].times[commits, measure])
                long = median(by[place, False].times[commits, measure])
                rows.append([f"{commits:,}", measure, place, f"{short:.1f}", f"{long:.1f}",
                             f"{long / short:.2f}x"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeat", type=int, default=15, help="rounds over the tables")
    parser.add_argument("--retention-seconds", type=int, default=1)
    parser.add_argument("--places", nargs="+", choices=["local", "s3"], default=["local", "s3"])
    parser.add_argument("--no-sail", action="store_true", help="no Sail reads")
    args = parser.parse_args()
    print(f"load average {load()} at the start", file=sys.stderr)
    with tempfile.TemporaryDirectory() as work:
        minio = start_minio(Path(work)) if "s3" in args.places else None
        if minio is not None:
            os.environ.update(minio.env)
        try:
            rows, loads = run(args, Path(work), minio)
        finally:
            if minio is not None:
                minio.stop()
    print(table(rows))
    print("\n".join(loads))


if __name__ == "__main__":
    main()
