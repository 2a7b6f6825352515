"""The lake on S3 (MinIO on loopback) next to the lake on local disk, in the same run.

Measures, alternating local and S3 runs `--repeat` times (medians):
- ingest changes/s of a 1M-change transaction (streamed: spilled and read back on S3)
  and of 100-change transactions, with the ingest's peak memory, against
  pg_recvlogical draining the same WAL (the limit);
- bronze commit latency: one delta-rs append of a 1,000-change batch;
- one incremental silver run (Sail) over the 100-change transactions;
- end-to-end freshness: a source commit until silver shows it, ingest running.

MinIO runs on this machine, so S3 here costs requests and HTTP, not a network's latency:
read the S3 column as the floor of what a real store adds.

    python -m bench.object_store_bench [--changes 1000000] [--repeat 3]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import psycopg
import pyarrow as pa
import yaml
from deltalake import write_deltalake

from bench.common import changes_and_repeats, embedded_server, lakehouse, table, timed
from pipelines.config import SourceConfig, load_config
from pipelines.embedded_pg import bin_dir
from pipelines.lake import Lake
from pipelines.source.setup import run_setup
from tests.support.object_stores import start_minio

TABLES = ["public.bench", "public.scratch"]
ONE_TRANSACTION = ("INSERT INTO bench SELECT g, md5(g::text), g * 1.5, now() "
                   "FROM generate_series({start}, {start} + {n} - 1) g")
SMALL_TRANSACTIONS = ("CREATE OR REPLACE PROCEDURE many(first bigint, n int) LANGUAGE plpgsql "
                      "AS $$ BEGIN FOR i IN 0..n / 100 - 1 LOOP INSERT INTO bench SELECT g, "
                      "md5(g::text), g * 1.5, now() FROM generate_series(first + i * 100, "
                      "first + i * 100 + 99) g; COMMIT; END LOOP; END $$")


class Lakes:
    """One config per (place, repeat): local disk or a MinIO bucket, each its own slot."""

    def __init__(self, work: Path, dsn: str, minio) -> None:
        self.work, self.dsn, self.minio = work, dsn, minio
        self.lakes: dict[str, dict] = {}

    def config(self, place: str, i: int, **sections) -> Path:
        slot = f"{place}{i}"
        lake = self.lakes.get(slot) or ({"path": self.minio.new_lake(slot), "storage_options": self.minio.storage_options}
                if place == "s3" else {"path": str(self.work / slot)})
        self.lakes[slot] = lake
        path = self.work / f"{slot}.yml"
        path.write_text(yaml.safe_dump({
            "source": {"dsn": self.dsn, "tables": TABLES, "slot": slot, "publication": "bench"},
            "lake": lake, **sections}))
        return path


def drain(dsn: str, lakes: Lakes, indexes: range, load, label: str) -> list[list[str]]:
    """Slots for pg_recvlogical and for each place, made at one position; `load` runs the
    workload; then each consumer drains it into its own lake, alternating local and S3."""
    for i in indexes:
        for place in ("local", "s3"):
            run_setup(SourceConfig(dsn, slot=f"{place}{i}", publication="bench",
                                   tables=tuple(TABLES)))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                         (f"recv{i}",))
    changes, end = load()
    runs: dict[str, list] = {"recv": [], "local": [], "s3": []}
    for i in indexes:
        runs["recv"].append(timed([
            str(bin_dir() / "pg_recvlogical"), "-d", dsn, "--slot", f"recv{i}", "--start",
            "--no-loop", "-o", "proto_version=2", "-o", "streaming=on", "-o",
            "publication_names=bench", "-E", end, "-f", "/dev/null"]))
        for place in ("local", "s3") if i % 2 == 0 else ("s3", "local"):
            runs[place].append(lakehouse(lakes.config(place, i), "ingest", "--until-lsn", end))
        print(f"{label} #{i % 10 + 1}: " + ", ".join(
            f"{k} {changes / v[-1].seconds:,.0f}/s" for k, v in runs.items()), file=sys.stderr)
    limit = median(r.seconds for r in runs["recv"])
    rows = []
    for place in ("local", "s3"):
        seconds = median(r.seconds for r in runs[place])
        rows.append([f"ingest, {label}", place, f"{changes / seconds:,.0f} changes/s",
                     f"{limit / seconds:.2f}x pg_recvlogical",
                     f"{max(r.peak_rss_mb for r in runs[place]):.0f} MB peak"])
    return rows


def commit_latency(lakes: Lakes, repeat: int, commits: int = 30) -> list[list[str]]:
    """One delta-rs append of a 1,000-row batch, as the ingest commits (ms, median)."""
    batch = pa.table({"id": pa.array(range(1000), pa.int64()),
                      "v": pa.array([f"value {n}" for n in range(1000)])})
    times: dict[str, list[float]] = {"local": [], "s3": []}
    for i in range(repeat):
        for place in ("local", "s3"):
            location = Lake.from_config(load_config(lakes.config(place, 100 + i))).table("t")
            write_deltalake(location.uri, batch, storage_options=location.delta_options)
            table_ = location.open()
            for _ in range(commits):
                started = time.perf_counter()
                write_deltalake(table_, batch, mode="append")
                times[place].append(time.perf_counter() - started)
    return [["bronze commit, 1,000 rows", place, f"{median(t) * 1000:.0f} ms", "", ""]
            for place, t in times.items()]


def silver_and_freshness(lakes: Lakes, indexes: range) -> list[list[str]]:
    """A silver run over what the ingest landed (the 100-change transactions), then the
    freshness probe with the ingest running beside silver."""
    silver: dict[str, list[float]] = {"local": [], "s3": []}
    fresh: dict[str, list[float]] = {"local": [], "s3": []}
    for i in indexes:
        for place in ("local", "s3") if i % 2 == 0 else ("s3", "local"):
            config = lakes.config(place, i, ingest={"batch_seconds": 0.2})
            run = lakehouse(config, "silver", stdout=subprocess.DEVNULL)
            silver[place].append(run.seconds)
            fresh[place].append(freshness(config))
        print(f"silver #{i % 10 + 1}: " + ", ".join(
            f"{k} {v[-1]:.1f} s, fresh {fresh[k][-1]:.1f} s" for k, v in silver.items()),
            file=sys.stderr)
    rows = [["silver run (Sail), first", place, f"{median(t):.1f} s", "", ""]
            for place, t in silver.items()]
    rows += [["freshness, commit to silver", place, f"{median(t):.1f} s", "", ""]
             for place, t in fresh.items()]
    return rows


def freshness(config_path: Path) -> float:
    """Source commit -> silver, with `lakehouse ingest` running and silver in a loop."""
    from pipelines.demo.run import probe_freshness
    from pipelines.engine import get_spark

    config = load_config(config_path)
    ingest = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "-q", "--config",
                               str(config_path), "ingest"])
    try:
        return probe_freshness(config, get_spark(config))
    finally:
        ingest.terminate()
        ingest.wait(60)


def main() -> None:
    args = changes_and_repeats(__doc__, "runs per place, alternating local and S3 (medians)")
    print(f"load average {os.getloadavg()[0]:.2f} at the start", file=sys.stderr)
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        minio = start_minio(Path(work))
        os.environ.update(minio.env)
        try:
            dsn = server.dsn()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE bench (id bigint PRIMARY KEY, v text, n numeric, "
                             "at timestamptz)")
                conn.execute("CREATE TABLE scratch (id int PRIMARY KEY, note text)")
                conn.execute(SMALL_TRANSACTIONS)
            lakes = Lakes(Path(work), dsn, minio)

            def one_transaction():
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(ONE_TRANSACTION.format(start=1, n=args.changes))
                    return args.changes, conn.execute(
                        "SELECT pg_current_wal_lsn()::text").fetchone()[0]

            def small_transactions():
                n = args.changes // 5
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("CALL many(%s, %s)", (args.changes + 1, n))
                    return n, conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]

            rows = [["measure", "lake", "result", "vs limit", "memory"]]
            rows += drain(dsn, lakes, range(args.repeat), one_transaction, "1 transaction")
            small = range(10, 10 + args.repeat)  # fresh slots and lakes
            rows += drain(dsn, lakes, small, small_transactions, "100-change txns")
            rows += commit_latency(lakes, args.repeat)
            rows += silver_and_freshness(lakes, small)
        finally:
            minio.stop()
    print(table(rows))


if __name__ == "__main__":
    main()
