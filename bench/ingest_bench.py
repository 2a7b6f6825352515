"""Ingest throughput vs pg_recvlogical, and peak memory on a 1M-change transaction.

Both consumers drain identical slots (created at the same WAL position) over TCP on
localhost: pg_recvlogical writes pgoutput to /dev/null (the physical limit of reading
the slot); `lakehouse ingest --until-lsn` decodes, assembles and commits to bronze.

Rates depend on what else the machine runs (the server's walsender needs a core too), so
each workload runs both consumers `--repeat` times, alternating, and reports medians and
the range of the per-pair ratios; each pair and its load average is printed as it ends.

    python -m bench.ingest_bench [--changes 1000000] [--repeat 3]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
from pathlib import Path
from statistics import median

import psycopg

from bench.common import (
    changes_and_repeats, embedded_server, lakehouse, table, timed, write_config)
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


def run(name: str, changes: int, repeat: int) -> list[str]:
    """Drain `repeat` pairs of identical slots, alternating pg_recvlogical and the ingest
    so that both see about the same machine load; rates and ratios are medians."""
    with embedded_server() as server, tempfile.TemporaryDirectory() as work:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE bench (id bigint PRIMARY KEY, v text, n numeric, "
                         "at timestamptz)")
        for i in range(repeat):
            run_setup(SourceConfig(dsn, slot=f"lakehouse{i}", tables=("public.bench",)))
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')",
                             (f"recv{i}",))
        end = load(dsn, name, changes)

        recvs, ingests, cpus = [], [], []
        for i in range(repeat):
            recv = timed([str(bin_dir() / "pg_recvlogical"), "-d", dsn, "--slot", f"recv{i}",
                          "--start", "--no-loop", "-o", "proto_version=2", "-o",
                          "streaming=on", "-o", "publication_names=lakehouse", "-E", end,
                          "-f", "/dev/null"])
            config = write_config(Path(work) / f"lakehouse{i}.yml", dsn,
                                  Path(work) / f"lake{i}", slot=f"lakehouse{i}")
            before = _children_cpu_seconds()
            ingest = lakehouse(config, "ingest", "--until-lsn", end)
            cpus.append(_children_cpu_seconds() - before)
            assert recv.returncode == 0
            recvs.append(recv)
            ingests.append(ingest)
            print(f"{name} #{i + 1}: pg_recvlogical {changes / recv.seconds:,.0f}/s, ingest "
                  f"{changes / ingest.seconds:,.0f}/s ({recv.seconds / ingest.seconds:.2f}x, "
                  f"{ingest.peak_rss_mb:.0f} MB), load average {_load()}", file=sys.stderr)
        startup = timed([sys.executable, "-c", "import pipelines.ingest.run, deltalake"])
        recv_seconds = median(one.seconds for one in recvs)
        ingest_seconds = median(one.seconds for one in ingests)
        ratios = sorted(recv.seconds / ingest.seconds for recv, ingest in zip(recvs, ingests))
        steady = changes / max(ingest_seconds - startup.seconds, 1e-9)
        return [name, f"{changes:,}", f"{changes / recv_seconds:,.0f}",
                f"{max(one.peak_rss_mb for one in recvs):.0f}",
                f"{changes / ingest_seconds:,.0f}", f"{steady:,.0f}",
                f"{median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})",
                f"{max(one.peak_rss_mb for one in ingests):.0f}", f"{median(cpus):.1f}"]


def _children_cpu_seconds() -> float:
    """User + system CPU of the children waited for so far (timed() waits for its child)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    args = changes_and_repeats(
        __doc__, "runs of each consumer per workload, alternating (medians)")
    rows = [["workload", "changes", "recvlogical/s", "recv MB", "ingest/s",
             "ingest/s excl. start-up", "ratio (range)", "ingest peak MB", "ingest CPU s"]]
    print(f"load average {_load()} at the start ({os.cpu_count()} CPUs)", file=sys.stderr)
    for name in WORKLOADS:
        rows.append(run(name, args.changes, args.repeat))
    print(table(rows))


if __name__ == "__main__":
    main()
