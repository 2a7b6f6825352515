"""`lakehouse run`'s loop: ingest, silver and gold together, for local use.

The ingest runs as its own process (as in production: no JVM, restartable on its own);
this process applies silver, then gold, as soon as bronze has new commits (at most one
pass per `silver.interval_seconds`: pipelines.silver.trigger). Ctrl-C or SIGTERM
stops the ingest first (it lands whole transactions and confirms them), then one last
silver and gold pass applies what landed, so nothing received is left unapplied.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Mapping, Sequence

from pipelines.config import Config
from pipelines.errors import ConfigError
from pipelines.metrics import count_error
from pipelines.passes import FailedPasses
from pipelines.silver.trigger import Trigger

if TYPE_CHECKING:
    from pipelines.gold.due import DueReports
    from pipelines.silver.job import SilverRunReport

log = logging.getLogger(__name__)


class IngestProcess:
    """`lakehouse ingest` as a child process with the same config and overrides."""

    def __init__(self, config_path: str | Path | None, overrides: Sequence[str] = (),
                 output: IO | None = None, env: Mapping[str, str] | None = None) -> None:
        argv = [sys.executable, "-m", "pipelines.cli"]
        if config_path is not None:
            argv += ["--config", str(config_path)]
        for override in overrides:
            argv += ["--set", override]
        self.process = subprocess.Popen(argv + ["ingest"], stdout=output, env=env,
                                        stderr=subprocess.STDOUT if output else None)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM: the ingest lands whole transactions, confirms them and exits 0."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def run_pipeline(config: Config, ingest: IngestProcess, spark, stop: threading.Event) -> int:
    """Silver and gold in a loop beside the ingest until `stop`; returns an exit code."""
    from pipelines.gold.due import DueReports

    failures = FailedPasses("silver and gold pass")
    trigger = Trigger.from_config(config)
    due = DueReports()
    try:
        while not stop.is_set():
            if not ingest.running:
                code = ingest.process.returncode
                log.error("the ingest exited with %s; stopping", code)
                return code or 1
            if trigger.due(stop):
                trigger.ran(failures.run(lambda: apply_once(config, spark, due)) is not None)
    finally:
        code = ingest.stop()
        log.info("ingest stopped (exit %s); applying what it landed", code)
        apply_once(config, spark, due)
    return 0


def apply_once(config: Config, spark, due: "DueReports") -> SilverRunReport:
    """One silver run, then, if it changed a table, the reports (when configured) whose
    inputs it changed or that `due` has not seen refreshed (pipelines.gold.due)."""
    from pipelines.gold.run import log_once, run_configured_gold  # Spark's: not for --help
    from pipelines.silver.job import run_silver

    silver = run_silver(config, spark)
    changed = [t for t in silver.tables if t.error is None]
    for failed in silver.failed:
        log.error("silver %s stopped: %s", failed.table, failed.error)
    if changed:
        try:
            # a table whose batch failed may have committed part of it: its readers too
            gold = run_configured_gold(spark, config, due=due,
                                       changed=[t.table for t in silver.tables])
        except ConfigError as exc:  # the reports directory: the ingest and silver go on
            count_error("gold_report")
            log_once(logging.ERROR, "reports", "not refreshed", str(exc))
            gold = None
        changes = sum(t.inserts + t.updates + t.deletes for t in changed)
        log.info("silver applied %d table(s) in %.2f s (%d bronze changes)%s", len(changed),
                 silver.seconds, changes, "" if gold is None else
                 f"; gold {len(gold.written)} report(s) in {gold.seconds:.2f} s"
                 + (f", {gold.unchanged} with nothing new" if gold.unchanged else ""))
    return silver
