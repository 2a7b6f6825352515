"""`lakehouse backfill`: the CLI verb. Parses flags, runs the backfill, prints a summary."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from pipelines.backfill.progress import ProgressDisplay, format_duration
from pipelines.backfill.runner import BackfillOptions, TableResult, run_backfill
from pipelines.collector import collect_rarely
from pipelines.config import Config
from pipelines.logs import report
from pipelines.backfill.progress import BACKFILL
from pipelines.metrics import add_port_argument, serve
from pipelines.terminal import format_table

EXIT_INTERRUPTED = 130


def add_parser(verbs: Any) -> None:
    parser = verbs.add_parser(
        "backfill", help="snapshot existing rows into bronze while ingest runs (DBLog)",
        description="Read the rows that existed before the replication slot, in chunks on "
        "each table's primary key, into bronze/snapshots. Each chunk sits between a low and "
        "a high watermark in the WAL so silver can merge it with concurrent changes; no "
        "locks, streaming never pauses. Run it beside `lakehouse ingest`. A crash or Ctrl-C "
        "resumes from the last chunk on the next run; a finished table is only read again "
        "with --restart.")
    parser.add_argument("tables", nargs="*", metavar="TABLE",
                        help="schema.table to backfill (default: every configured table "
                        "not backfilled yet)")
    parser.add_argument("--chunk-size", type=int, metavar="N",
                        help="rows per chunk (default: backfill.chunk_size, 50000)")
    parser.add_argument("--restart", action="store_true",
                        help="start over with a new backfill id, also for finished tables")
    parser.add_argument("--resync", action="store_true",
                        help="read the tables again and also delete from silver every row the "
                        "source no longer has: the repair for a table `verify` reports as "
                        "different (resyncs scheduled by `lakehouse recover` run without it)")
    parser.add_argument("--parallel", type=int, metavar="N",
                        help="tables backfilled at the same time (default: backfill.parallel, 1)")
    add_port_argument(parser, key=None)  # a one-off run beside the service: no config key
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, config: Config) -> int:
    serve(config, args.metrics_port, BACKFILL, key=None)
    collect_rarely()
    options = BackfillOptions(
        tables=tuple(args.tables), restart=args.restart, resync=args.resync,
        chunk_size=config.backfill.chunk_size if args.chunk_size is None else args.chunk_size,
        parallel=config.backfill.parallel if args.parallel is None else args.parallel)
    stop = threading.Event()
    with _stop_on_signals(stop):
        results = run_backfill(config, options, ProgressDisplay(), stop)
    print_summary(results)
    failed = [r.error for r in results if r.error is not None]
    if failed:
        for error in failed:
            report(f"lakehouse backfill: error: {error}")
        return max(error.exit_code for error in failed)
    if any(r.status == "interrupted" for r in results):
        return EXIT_INTERRUPTED
    return 0


def print_summary(results: list[TableResult]) -> None:
    rows = [(r.table, r.status, r.rows, r.chunks,
             format_duration(r.seconds) if r.seconds >= 1 else f"{r.seconds:.1f}s",
             round(r.rows / r.seconds) if r.seconds > 0 and r.rows else None,
             r.total_rows, r.backfill_id or "-") for r in results]
    print(format_table(("table", "status", "rows", "chunks", "time", "rows/s", "total rows",
                        "backfill id"), rows))


class _stop_on_signals:
    """First SIGINT/SIGTERM: finish the chunks in flight and stop (resumable).

    A second one gets the default behaviour (SIGTERM ends the process at once; the state
    is consistent at every moment, so that is resumable too).
    """

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "_stop_on_signals":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: object) -> None:
        if self.stop.is_set():
            self.__exit__()
            os.kill(os.getpid(), signum)
            return
        self.stop.set()
        print("lakehouse backfill: stopping after the chunks in flight (again to abort)",
              file=sys.stderr)
