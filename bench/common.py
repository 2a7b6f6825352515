"""Benchmark plumbing: an embedded server, timed child processes with their peak RSS."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pipelines.embedded_pg import EmbeddedPostgres, free_port


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_rss_mb: float
    returncode: int


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


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)
