"""`lakehouse silver`: one incremental run, or a loop with --continuous."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import TYPE_CHECKING, Callable

from pipelines.config import Config
from pipelines.errors import ConfigError
from pipelines.metrics import add_port_argument
from pipelines.metrics_collectors import serve_service
from pipelines.silver.run_metrics import SILVER
from pipelines.passes import FailedPasses

if TYPE_CHECKING:  # the CLI imports every verb module: keep Spark out of its start-up
    from pipelines.silver.job import SilverRunReport
    from pipelines.silver.trigger import Trigger

log = logging.getLogger(__name__)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "silver", help="apply new bronze to the typed current-state silver tables",
        description="Reconcile backfill chunks with the change stream and MERGE the "
        "bronze that is new since the last run into one Delta table per source table "
        "(<lake>/silver/<schema>/<table>), last writer wins. Safe to re-run: a run after "
        "a crash applies the same changes again without effect. Exit 4 if a table "
        "stopped on a data error (e.g. a type change silver cannot widen); the other "
        "tables are still applied.")
    parser.add_argument("--continuous", action="store_true",
                        help="keep running until SIGINT/SIGTERM: a run starts as soon as "
                        "bronze has new commits")
    parser.add_argument("--interval", type=float, metavar="S",
                        help="with --continuous, at least this many seconds between the "
                        "starts of two runs (default: silver.interval_seconds, 1)")
    parser.add_argument("--table", action="append", metavar="T", dest="tables",
                        help="only this schema.table (repeatable; default: all)")
    parser.add_argument("--rebuild", action="append", metavar="T", default=[],
                        help="replace this table's silver data with a rebuild from all of "
                        "bronze, e.g. after a type change (repeatable)")
    add_port_argument(parser, key="silver_port", when="with --continuous: ")
    parser.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace, config: Config) -> int:
    from pipelines.engine import get_spark
    from pipelines.silver.job import run_silver

    if args.interval is not None and args.interval <= 0:
        raise ConfigError(f"--interval: got {args.interval}, expected a positive number "
                          "of seconds")
    if args.continuous:  # a single run is over before anyone scrapes it
        serve_service(config, args.metrics_port, *SILVER, key="silver_port")
    elif args.metrics_port is not None:
        raise ConfigError("--metrics-port: only with --continuous")
    spark = get_spark(config)
    if not args.continuous:
        report = run_silver(config, spark, args.tables, args.rebuild)
        print_report(report)
        return 4 if report.failed else 0
    from pipelines.silver.trigger import Trigger

    stop = threading.Event()
    _stop_on_signals(stop)
    rebuild = list(args.rebuild)

    def once() -> "SilverRunReport":
        nonlocal rebuild
        report = run_silver(config, spark, args.tables, rebuild)
        rebuild = []  # a rebuild happens once; later runs continue from its progress
        return report

    run_continuously(once, Trigger.from_config(config, args.interval), stop)
    return 0


def run_continuously(run_once: Callable[[], "SilverRunReport"], trigger: "Trigger",
                     stop: threading.Event) -> int:
    """Call run_once whenever the trigger says bronze has something new, until `stop`;
    returns the run count.

    A table that failed is logged when its error first appears or changes; a run that
    raised is logged and tried again (pipelines.passes).
    """
    runs, errors, failures = 0, {}, FailedPasses("silver run")
    while not stop.is_set():
        if not trigger.due(stop):
            continue
        report = failures.run(run_once)
        runs += 1
        trigger.ran(report is not None)
        if report is None:
            continue
        if report.tables:
            print_report(report)
        for table in report.tables:
            if table.error and errors.get(table.table) != table.error:
                log.error("silver %s stopped: %s", table.table, table.error)
            errors[table.table] = table.error
    return runs


def print_report(report: "SilverRunReport") -> None:
    if report.upto is None:
        print("silver: nothing new in bronze")
        return
    for t in report.tables:
        if t.error:
            print(f"{t.table}: STOPPED: {t.error}")
            continue
        extra = "".join([", truncated" if t.truncated else "",
                         f", {t.chunks} backfill chunk(s)" if t.chunks else "",
                         f", new columns {', '.join(t.columns_added)}" if t.columns_added
                         else "",
                         f", widened {', '.join(t.columns_widened)}" if t.columns_widened
                         else ""])
        print(f"{t.table}: {t.inserts} inserts, {t.updates} updates, {t.deletes} deletes"
              f"{extra}")
    print(f"silver: applied bronze up to {report.upto[0]}/{report.upto[1]} "
          f"in {report.seconds:.1f}s")


def _stop_on_signals(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

