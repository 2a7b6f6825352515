"""Per-table progress on stderr: a redrawn block of lines on a terminal, log lines otherwise.

Rows, rows/s and an ETA from the table's pg_class.reltuples estimate. Deliberately tiny
(no progress-bar dependency); safe to call from several table workers at once.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

log = logging.getLogger(__name__)


@dataclass
class _Table:
    estimate: int | None
    rows_before: int  # done by earlier runs of the same backfill
    rows: int = 0  # done by this run
    started: float = 0.0
    status: str = "running"


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class ProgressDisplay:
    """Tracks each table's rows; draws at most `redraw_seconds` apart (log: `log_seconds`)."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None,
                 log_seconds: float = 10.0, redraw_seconds: float = 0.2) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.log_seconds = log_seconds
        self.redraw_seconds = redraw_seconds
        self._tables: dict[str, _Table] = {}
        self._lock = threading.Lock()
        self._drawn_lines = 0
        self._last_draw = 0.0
        self._last_log: dict[str, float] = {}

    def start(self, table: str, estimate: int | None, rows_before: int = 0) -> None:
        with self._lock:
            self._tables[table] = _Table(estimate, rows_before, started=time.monotonic())
            self._last_log[table] = time.monotonic()
            if self.tty:
                self._draw(force=True)
            else:
                log.info("backfill %s", self.line(table))

    def advance(self, table: str, rows: int) -> None:
        with self._lock:
            self._tables[table].rows += rows
            now = time.monotonic()
            if self.tty:
                self._draw()
            elif now - self._last_log[table] >= self.log_seconds:
                self._last_log[table] = now
                log.info("backfill %s", self.line(table))

    def finish(self, table: str, status: str) -> None:
        with self._lock:
            self._tables[table].status = status
            if self.tty:
                self._draw(force=True)
            else:
                log.info("backfill %s", self.line(table))

    def line(self, table: str) -> str:
        """e.g. 'public.users  120,000 / ~1,000,000 rows  12%  245,000 rows/s  ETA 3m35s'"""
        t = self._tables[table]
        elapsed = max(time.monotonic() - t.started, 1e-6)
        rate = t.rows / elapsed
        done = t.rows_before + t.rows
        text = f"{table}  {done:,}"
        if t.estimate:
            text += f" / ~{t.estimate:,} rows  {min(100, 100 * done // t.estimate)}%"
        else:
            text += " rows"
        text += f"  {rate:,.0f} rows/s"
        if t.status != "running":
            return f"{text}  {t.status} in {format_duration(elapsed)}"
        if t.estimate and rate > 0:
            text += f"  ETA {format_duration(max(0, t.estimate - done) / rate)}"
        return text

    def _draw(self, force: bool = False) -> None:
        if not self.tty:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self.redraw_seconds:
            return
        self._last_draw = now
        out = "\x1b[1A\x1b[2K" * self._drawn_lines if self._drawn_lines else ""
        out += "".join(f"\r\x1b[2K{self.line(t)}\n" for t in self._tables)
        self._drawn_lines = len(self._tables)
        self.stream.write(out)
        self.stream.flush()
