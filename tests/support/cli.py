"""`lakehouse` as a process of its own, as users and jobs run it: the one place the tests
start the command line (this interpreter, `python -m pipelines.cli`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any


def lakehouse_command(config: Path | str | None, *args: str) -> list[str]:
    """The argv of `lakehouse [--config CONFIG] ARGS`."""
    options = ["--config", str(config)] if config is not None else []
    return [sys.executable, "-m", "pipelines.cli", *options, *args]


def lakehouse(config: Path | str | None, *args: str, check: bool = True,
              timeout: float | None = 600, **run: Any) -> subprocess.CompletedProcess:
    """Run `lakehouse [--config CONFIG] ARGS` to its end, its output captured as text.
    `run` goes to subprocess.run (env: the whole environment; input; cwd). With `check`
    an exit other than 0 fails the test with the command's stderr."""
    result = subprocess.run(lakehouse_command(config, *args), capture_output=True, text=True,
                            timeout=timeout, **run)
    if check:
        assert result.returncode == 0, f"lakehouse {' '.join(args)}:\n{result.stderr[-4000:]}"
    return result


def start_lakehouse(config: Path | str | None, *args: str, **popen: Any) -> subprocess.Popen:
    """Start `lakehouse [--config CONFIG] ARGS` in the background (ingest, run, a backfill
    to kill, sql --serve); `popen` goes to subprocess.Popen (stdout, stderr, text, env)."""
    return subprocess.Popen(lakehouse_command(config, *args), **popen)
