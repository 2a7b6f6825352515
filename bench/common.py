"""Benchmark plumbing: an embedded server, timed child processes with their peak RSS."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psycopg
import yaml

from pipelines.embedded_pg import EmbeddedPostgres, free_port


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_rss_mb: float
    returncode: int


@contextmanager
def work_and_results(work: Path | None, prefix: str,
                     json_path: Path | None) -> Iterator[tuple[Path, list[dict], list[dict]]]:
    """A benchmark's work directory (a temporary one, removed at the end, unless given)
    and its lists of builds and results, written to `json_path` even when a case fails:
    what was measured before it is kept."""
    directory = work or Path(tempfile.mkdtemp(prefix=prefix))
    directory.mkdir(parents=True, exist_ok=True)
    builds: list[dict] = []
    results: list[dict] = []
    try:
        yield directory, builds, results
    finally:
        if json_path:
            json_path.write_text(json.dumps({"builds": builds, "results": results},
                                            default=str, indent=1))
        if work is None:
            shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def embedded_server(**settings: str) -> Iterator[EmbeddedPostgres]:
    base = Path(tempfile.mkdtemp(prefix="lakehouse-bench-"))
    base.chmod(0o755)
    server = EmbeddedPostgres(base / "data", free_port()).start(settings)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def timed(argv: list[str], **kwargs) -> Run:
    """Run a child to completion: wall seconds and its own peak RSS (wait4)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, **kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(seconds, usage.ru_maxrss / 1024, proc.returncode)


def write_config(path: Path, dsn: str, lake: Path, slot: str | None = None,
                 **sections: dict) -> Path:
    """A lakehouse config for the table public.bench (plus whole `sections`)."""
    source = {"dsn": dsn, "tables": ["public.bench"], **({"slot": slot} if slot else {})}
    path.write_text(yaml.safe_dump({"source": source, "lake": {"path": str(lake)}, **sections}))
    return path


def current_lsn(dsn: str) -> str:
    """The source's WAL position now: `lakehouse ingest --until-lsn` lands bronze up to it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


def lakehouse(config: Path, verb: str, *args: str, **kwargs) -> Run:
    """`lakehouse -q --config CONFIG VERB ARGS...` in a child process, timed; a benchmark
    of a failed run means nothing, so a non-zero exit ends the benchmark."""
    run = timed([sys.executable, "-m", "pipelines.cli", "-q", "--config", str(config), verb,
                 *args], **kwargs)
    if run.returncode != 0:
        raise SystemExit(f"lakehouse {verb} failed with exit code {run.returncode}")
    return run


def changes_and_repeats(doc: str, repeat_help: str) -> argparse.Namespace:
    """The usual arguments of an ingest benchmark: --changes and --repeat."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help=repeat_help)
    return parser.parse_args()


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)
