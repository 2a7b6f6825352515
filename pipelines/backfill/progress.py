"""Per-table backfill progress: live bars on a terminal, periodic log lines otherwise.

Rows against the table's pg_class.reltuples estimate, rows/s and an ETA, kept once per
table (TableTicker) for the display and the metrics endpoint alike. Off a terminal
(jobs, CI) rich's Progress is disabled, since a bar would only fill a log with control
codes, and a log line per table every `log_seconds` says the same. Several table
workers report at once: each advances only its own table.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

from pipelines.metrics import GaugeCollector, Samples
from pipelines.terminal import stderr_console

log = logging.getLogger(__name__)


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def eta_seconds(done: int, estimate: int | None, rows_this_run: int,
                elapsed: float) -> float | None:
    """Seconds until `estimate` rows are done at this run's rate; None without an
    estimate or before the run has a rate (the first chunk)."""
    if not estimate or rows_this_run <= 0 or elapsed <= 0:
        return None
    return max(0, estimate - done) * elapsed / rows_this_run


@dataclass
class TableTicker:
    """One table's backfill in this run, as the display shows it and the metrics serve
    it (BackfillMetrics reads these records). One rate rule for both:
    the rows of this run over its whole time, earlier runs of the same backfill left out."""

    table: str
    estimate: int | None  # pg_class.reltuples when the run started
    rows_before: int  # done by earlier runs of the same backfill
    clock: Callable[[], float]
    started: float
    rows: int = 0  # done by this run
    status: str = ""  # how the run ended: done, interrupted, failed
    ended: float | None = None

    @property
    def done(self) -> int:
        return self.rows_before + self.rows

    def elapsed(self) -> float:
        return (self.clock() if self.ended is None else self.ended) - self.started

    def rate(self) -> float:
        """Rows per second of this run."""
        elapsed = self.elapsed()
        return self.rows / elapsed if elapsed > 0 else 0.0

    def eta(self) -> float | None:
        """Seconds left at this run's rate; 0 once done; None without an estimate, before
        the first chunk and after a run that ended otherwise."""
        if self.status:
            return 0.0 if self.status == "done" else None
        return eta_seconds(self.done, self.estimate, self.rows, self.elapsed())


class BackfillMetrics(GaugeCollector):
    """Rows done, the row estimate and the ETA per table, read at each scrape from the
    tickers the progress display keeps: one bookkeeping and one rate for the bars, the
    log lines and the metrics."""

    HELP = {
        "lakehouse_backfill_rows_done": "Rows of the table's backfill done so far (all "
        "runs).",
        "lakehouse_backfill_rows_estimate": "Rows the table had when its backfill started "
        "(pg_class.reltuples).",
        "lakehouse_backfill_eta_seconds": "Seconds until the backfill reaches the estimate "
        "at this run's rate; 0 when done, absent before the first chunk and after an "
        "interrupted run.",
    }

    def __init__(self) -> None:
        super().__init__(self.HELP, ["table"], self._samples)
        self._tables: dict[str, TableTicker] = {}
        self._lock = threading.Lock()  # table jobs start in parallel threads

    def track(self, table: TableTicker) -> None:
        """Serve this table's ticker (in place of an earlier run's)."""
        with self._lock:
            self._tables[table.table] = table

    def _samples(self) -> Samples:
        values: dict[str, list] = {name: [] for name in self.HELP}
        with self._lock:
            tables = list(self._tables.values())
        for t in tables:
            values["lakehouse_backfill_rows_done"].append(([t.table], t.done))
            if t.estimate:
                values["lakehouse_backfill_rows_estimate"].append(([t.table], t.estimate))
            left = t.eta()
            if left is not None:
                values["lakehouse_backfill_eta_seconds"].append(([t.table], left))
        return values


BACKFILL = BackfillMetrics()  # what `lakehouse backfill --metrics-port` serves


def rows_text(table: TableTicker) -> str:
    """e.g. '120,000 / ~1,000,000 rows  12%' (no estimate: '120,000 rows')."""
    if not table.estimate:
        return f"{table.done:,} rows"
    return (f"{table.done:,} / ~{table.estimate:,} rows  "
            f"{min(100, 100 * table.done // table.estimate)}%")


def rate_text(table: TableTicker) -> str:
    return f"{table.rate():,.0f} rows/s"


def state_text(table: TableTicker) -> str:
    """'ETA 3m35s' while running (nothing before a rate is known), 'done in 4m02s' after."""
    if table.status:
        return f"{table.status} in {format_duration(table.elapsed())}"
    remaining = table.eta()
    return "" if remaining is None else f"ETA {format_duration(remaining)}"


class _Column(ProgressColumn):
    """One of the texts above as a column of the live display."""

    def __init__(self, text: Callable[[TableTicker], str]) -> None:
        super().__init__()
        self.text = text

    def render(self, task: Task) -> Text:
        return Text(self.text(task.fields["progress"]))


class ProgressDisplay:
    """The backfill's one progress tracker: each table's rows, shown on `console`
    (default: stderr's) and served as metrics (`metrics`, default the endpoint's).

    Live bars when the console is interactive (`tty` overrides), else a log line per
    table at its start, every `log_seconds` and at its end. `clock` and `auto_refresh`
    (off: the bars are redrawn by `refresh` and by log records only) are for tests.
    """

    def __init__(self, console: Console | None = None, tty: bool | None = None,
                 log_seconds: float = 10.0, metrics: BackfillMetrics = BACKFILL,
                 clock: Callable[[], float] = time.monotonic,
                 auto_refresh: bool = True) -> None:
        self.console = console or stderr_console()
        self.tty = self.console.is_interactive if tty is None else tty
        self.log_seconds = log_seconds
        self.metrics = metrics
        self.clock = clock
        self._progress = Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), _Column(rows_text),
            _Column(rate_text), _Column(state_text),
            console=self.console, disable=not self.tty, auto_refresh=auto_refresh)
        self._tables: dict[str, TableTicker] = {}
        self._tasks: dict[str, TaskID] = {}
        self._last_log: dict[str, float] = {}
        self._lock = threading.Lock()  # the table set and the live display's start/stop

    def start(self, table: str, estimate: int | None, rows_before: int = 0) -> None:
        progress = TableTicker(table, estimate or None, rows_before, self.clock,
                                 self.clock())
        with self._lock:
            if self.tty and not self._tasks:
                self._progress.start()
            self._tables[table] = progress
            self._tasks[table] = self._progress.add_task(
                table, total=progress.estimate, completed=rows_before, progress=progress)
            self._last_log[table] = progress.started
        self.metrics.track(progress)
        self._log(table)

    def advance(self, table: str, rows: int) -> None:
        progress = self._tables[table]
        progress.rows += rows  # one writer thread per table
        self._progress.update(self._tasks[table], completed=progress.done)
        now = self.clock()
        if not self.tty and now - self._last_log[table] >= self.log_seconds:
            self._last_log[table] = now
            self._log(table)

    def finish(self, table: str, status: str) -> None:
        """The table's run ended: done, interrupted or failed."""
        progress = self._tables[table]
        progress.ended = self.clock()
        progress.status = status
        self._progress.stop_task(self._tasks[table])
        self._log(table)
        with self._lock:
            if self.tty and all(t.status for t in self._tables.values()):
                # The bars stay on screen as they are; tables started later get new ones.
                self._progress.stop()
                for done in self._tasks.values():
                    self._progress.remove_task(done)
                self._tasks.clear()
                self._tables.clear()

    def refresh(self) -> None:
        """Redraw the bars now (with auto_refresh off)."""
        self._progress.refresh()

    def line(self, table: str) -> str:
        """e.g. 'public.users  120,000 / ~1,000,000 rows  12%  245,000 rows/s  ETA 3m35s'"""
        progress = self._tables[table]
        parts = (table, rows_text(progress), rate_text(progress), state_text(progress))
        return "  ".join(part for part in parts if part)

    def _log(self, table: str) -> None:
        if not self.tty:
            log.info("backfill %s", self.line(table))
