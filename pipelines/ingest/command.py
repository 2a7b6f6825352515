"""`lakehouse ingest`: the CLI verb around run_ingest."""

from __future__ import annotations

import argparse
import gc
import logging

from pipelines.config import Config
from pipelines.ingest.lsn import format_lsn, parse_lsn
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest

log = logging.getLogger(__name__)


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "ingest", help="stream changes from the replication slot into bronze",
        description="Stream the slot's changes (pgoutput) into the bronze Delta change log. "
        "Runs until SIGINT/SIGTERM, then lands whole transactions, confirms them to "
        "Postgres and exits 0. Restarts resume exactly where bronze ends.")
    parser.add_argument("--until-idle", type=float, metavar="SECONDS",
                        help="stop once nothing new arrived for SECONDS (batch and test use)")
    parser.add_argument("--until-lsn", type=_lsn, metavar="LSN",
                        help="stop once bronze holds every transaction up to LSN (e.g. 0/3000060)")
    parser.set_defaults(handler=_run)


def _lsn(text: str) -> int:
    try:
        return parse_lsn(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _run(args: argparse.Namespace, config: Config) -> int:
    _tune_garbage_collector()
    stop = StopRequested()
    stop.install_signal_handlers()
    report = run_ingest(config, IngestOptions(args.until_idle, args.until_lsn), stop)
    log.info("ingested %d transactions (%d changes) in %.1f s; confirmed %s",
             report.transactions, report.changes, report.seconds,
             format_lsn(report.confirmed_lsn))
    return 0


def _tune_garbage_collector() -> None:
    """Make the cyclic garbage collector run rarely in this process.

    The ingest allocates a few small containers per change and frees them by reference
    counting; its hot path makes no reference cycles. With the default thresholds the
    collector ran every 700 allocations and kept rescanning the buffered rows and the
    records of streamed transactions: a fifth to a quarter of the ingest's CPU on
    bench/ingest_bench.py's workloads. A collection now waits for a million more
    container allocations than deallocations: more than the ingest holds at once with
    the default settings (two per buffered change: a bronze batch, a streamed
    transaction's unspilled block), so in a steady stream it hardly runs (every 50,000
    still cost a tenth of the decoding time). What start-up loaded (modules, pyarrow,
    deltalake) is frozen out of every pass. Only the CLI does this: it owns its
    process; run_ingest callers do not.
    """
    gc.freeze()
    gc.set_threshold(1_000_000, 10, 10)
