"""When the next silver run of a loop starts: as soon as bronze has a commit the last run
did not see, and at least `silver.interval_seconds` after the last run started.

A fixed pause between runs would add half of it to every change's freshness, on average,
before any work is done. The ingest commits whole transactions only, so a new bronze
version is exactly "new whole transactions to apply". An idle loop looks for one every
`silver.poll_seconds`: delta-rs reads only the log entries added since it last looked
(one listing of `_delta_log`, also on an object store).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from pipelines.config import Config
from pipelines.lake import Lake, TableLocation

if TYPE_CHECKING:
    from deltalake import DeltaTable

_NOTHING_SEEN = -2  # before the first run: a loop always starts with one


class Trigger:
    """Tells a loop when its next run is due (`due`), and learns when one ended (`ran`)."""

    def __init__(self, bronze: TableLocation, interval: float, poll: float) -> None:
        self.bronze = bronze
        self.interval = interval
        self.poll = poll
        self._table: DeltaTable | None = None
        self._seen = _NOTHING_SEEN  # the bronze version the last good run started from
        self._due = _NOTHING_SEEN
        self._started: float | None = None

    @classmethod
    def from_config(cls, config: Config, interval: float | None = None) -> "Trigger":
        """The lake's bronze, silver.interval_seconds (or `interval`) and poll_seconds."""
        return cls(Lake.from_config(config).bronze_changes,
                   interval or config.silver.interval_seconds, config.silver.poll_seconds)

    def due(self, stop: threading.Event) -> bool:
        """True when a run should start now. Otherwise waits (at most poll_seconds, or
        until `stop`) and returns False, so the caller's loop can check other things."""
        version = self._bronze_version()
        if version == self._seen:
            stop.wait(self.poll)
            return False
        if self._started is not None:
            gap = self.interval - (time.monotonic() - self._started)
            if gap > 0:
                stop.wait(min(gap, self.poll))
                return False
        self._due = version
        self._started = time.monotonic()
        return not stop.is_set()

    def ran(self, ok: bool) -> None:
        """The run `due` allowed ended: what it started from is applied, unless it failed
        (then the next `due` allows another run after the interval)."""
        if ok:
            self._seen = self._due

    def _bronze_version(self) -> int:
        """Bronze's newest version (-1 while there is no bronze yet)."""
        if self._table is None:
            if not self.bronze.exists():
                return -1
            self._table = self.bronze.open()
        else:
            self._table.update_incremental()
        return self._table.version()
