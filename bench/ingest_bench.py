"""Ingest throughput vs pg_recvlogical, and peak memory on a 1M-change transaction.

Both consumers drain an identical slot (created at the same WAL position) over TCP on
localhost: pg_recvlogical writes pgoutput to /dev/null (the physical limit of reading
the slot); `lakehouse ingest --until-lsn` decodes, assembles and commits to bronze.

Rates depend on what else the machine runs (the server's walsender needs a core too):
the table shows the ingest's CPU seconds, and the load average is printed per workload.

    python -m bench.ingest_bench [--changes 1000000]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
from pathlib import Path

import psycopg
import yaml

from bench.common import embedded_server, table, timed
from pipelines.embedded_pg import bin_dir
from pipelines.source.setup import run_setup
from pipelines.config import SourceConfig

WORKLOADS = {
    "one transaction": "INSERT INTO bench SELECT g, md5(g::text), g * 1.5, now() "
                       "FROM generate_series(1, {n}) g",
    "100-row transactions": None,  # built below: n / 100 commits
}


def load(dsn: str, name: str, changes: int) -> str:
    """Run the workload; returns the WAL position after it."""
    with psycopg.connect(dsn, autocommit=True) as conn:  # CALL ... COMMIT needs autocommit
        if WORKLOADS[name]:
            conn.execute(WORKLOADS[name].format(n=changes))
        else:
            conn.execute("CREATE OR REPLACE PROCEDURE many(n int) LANGUAGE plpgsql AS $$ "
                         "BEGIN FOR i IN 0..n / 100 - 1 LOOP INSERT INTO bench SELECT "
                         "g, md5(g::text), g * 1.5, now() FROM generate_series(i * 100 + 1, "
                         "i * 100 + 100) g; COMMIT; END LOOP; END $$")
            conn.execute("CALL many(%s)", (changes,))
        return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


def run(name: str, changes: int) -> list[str]:
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE bench (id bigint PRIMARY KEY, v text, n numeric, "
                         "at timestamptz)")
        run_setup(SourceConfig(dsn, tables=("public.bench",)))
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_create_logical_replication_slot('recv', 'pgoutput')")
        end = load(dsn, name, changes)

        recv = timed([str(bin_dir() / "pg_recvlogical"), "-d", dsn, "--slot", "recv",
                      "--start", "--no-loop", "-o", "proto_version=2", "-o", "streaming=on",
                      "-o", "publication_names=lakehouse", "-E", end, "-f", "/dev/null"])
        config = Path(work) / "lakehouse.yml"
        config.write_text(yaml.safe_dump({
            "source": {"dsn": dsn, "tables": ["public.bench"]},
            "lake": {"path": str(Path(work) / "lake")}}))
        before = _children_cpu_seconds()
        ingest = timed([sys.executable, "-m", "pipelines.cli", "-q", "--config", str(config),
                        "ingest", "--until-lsn", end])
        ingest_cpu = _children_cpu_seconds() - before
        startup = timed([sys.executable, "-c", "import pipelines.ingest.run, deltalake"])
        assert recv.returncode == 0 and ingest.returncode == 0
        recv_rate = changes / recv.seconds
        ingest_rate = changes / ingest.seconds
        steady = changes / max(ingest.seconds - startup.seconds, 1e-9)
        print(f"{name}: load average {_load()} after the runs", file=sys.stderr)
        return [name, f"{changes:,}", f"{recv_rate:,.0f}", f"{recv.peak_rss_mb:.0f}",
                f"{ingest_rate:,.0f}", f"{steady:,.0f}", f"{ingest_rate / recv_rate:.2f}x",
                f"{ingest.peak_rss_mb:.0f}", f"{ingest_cpu:.1f}"]


def _children_cpu_seconds() -> float:
    """User + system CPU of the children waited for so far (timed() waits for its child)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000)
    args = parser.parse_args()
    rows = [["workload", "changes", "recvlogical/s", "recv MB", "ingest/s",
             "ingest/s excl. start-up", "ratio", "ingest peak MB", "ingest CPU s"]]
    print(f"load average {_load()} at the start ({os.cpu_count()} CPUs)", file=sys.stderr)
    for name in WORKLOADS:
        rows.append(run(name, args.changes))
    print(table(rows))


if __name__ == "__main__":
    main()
