"""Per-table backfill progress: live bars on a terminal, periodic log lines otherwise.

Rows against the table's pg_class.reltuples estimate, rows/s and an ETA. rich's Progress
keeps the numbers in both modes: off a terminal (jobs, CI) it is disabled, since a bar
would only fill a log with control codes, and a log line per table every `log_seconds`
says the same. Its methods are thread-safe, so several table workers report at once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

from pipelines.terminal import stderr_console

log = logging.getLogger(__name__)


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def rows_text(task: Task) -> str:
    """e.g. '120,000 / ~1,000,000 rows  12%' (no estimate: '120,000 rows')."""
    done = int(task.completed)
    if not task.total:
        return f"{done:,} rows"
    return f"{done:,} / ~{int(task.total):,} rows  {min(100, 100 * done // int(task.total))}%"


def rate_text(task: Task) -> str:
    """Rows/s over the last half minute while running (rich's estimate), over the whole
    run once finished; rows done by an earlier run of the same backfill do not count."""
    if task.fields["status"]:
        rate = (task.completed - task.fields["rows_before"]) / max(task.elapsed or 0, 1e-6)
    else:
        rate = task.speed or 0.0
    return f"{rate:,.0f} rows/s"


def state_text(task: Task) -> str:
    """'ETA 3m35s' while running (nothing before a rate is known), 'done in 4m02s' after."""
    if task.fields["status"]:
        return f"{task.fields['status']} in {format_duration(task.elapsed or 0)}"
    remaining = task.time_remaining if task.total else None
    return "" if remaining is None else f"ETA {format_duration(remaining)}"


class _Column(ProgressColumn):
    """One of the texts above as a column of the live display."""

    def __init__(self, text: Callable[[Task], str]) -> None:
        super().__init__()
        self.text = text

    def render(self, task: Task) -> Text:
        return Text(self.text(task))


class ProgressDisplay:
    """Tracks each table's rows and shows them on `console` (default: stderr's).

    Live bars when the console is interactive (`tty` overrides), else a log line per
    table at its start, every `log_seconds` and at its end.
    """

    def __init__(self, console: Console | None = None, tty: bool | None = None,
                 log_seconds: float = 10.0) -> None:
        self.console = console or stderr_console()
        self.tty = self.console.is_interactive if tty is None else tty
        self.log_seconds = log_seconds
        self._progress = Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), _Column(rows_text),
            _Column(rate_text), _Column(state_text),
            console=self.console, disable=not self.tty)
        self._tasks: dict[str, TaskID] = {}
        self._last_log: dict[str, float] = {}
        self._lock = threading.Lock()  # the table set and the live display's start/stop

    def start(self, table: str, estimate: int | None, rows_before: int = 0) -> None:
        with self._lock:
            if self.tty and not self._tasks:
                self._progress.start()
            self._tasks[table] = self._progress.add_task(
                table, total=estimate or None, completed=rows_before,
                rows_before=rows_before, status="")
            self._last_log[table] = time.monotonic()
        self._log(table)

    def advance(self, table: str, rows: int) -> None:
        self._progress.advance(self._tasks[table], rows)
        now = time.monotonic()
        if not self.tty and now - self._last_log[table] >= self.log_seconds:
            self._last_log[table] = now
            self._log(table)

    def finish(self, table: str, status: str) -> None:
        task = self._tasks[table]
        self._progress.update(task, status=status)
        self._progress.stop_task(task)
        self._log(table)
        with self._lock:
            if self.tty and all(t.fields["status"] for t in self._progress.tasks):
                # The bars stay on screen as they are; tables started later get new ones.
                self._progress.stop()
                for done in self._tasks.values():
                    self._progress.remove_task(done)
                self._tasks.clear()

    def line(self, table: str) -> str:
        """e.g. 'public.users  120,000 / ~1,000,000 rows  12%  245,000 rows/s  ETA 3m35s'"""
        task_id = self._tasks[table]
        task = next(t for t in self._progress.tasks if t.id == task_id)
        parts = (table, rows_text(task), rate_text(task), state_text(task))
        return "  ".join(part for part in parts if part)

    def _log(self, table: str) -> None:
        if not self.tty:
            log.info("backfill %s", self.line(table))
