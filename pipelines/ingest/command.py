"""`lakehouse ingest`: the CLI verb around run_ingest."""

from __future__ import annotations

import argparse
import logging

from pipelines.collector import collect_rarely
from pipelines.config import Config
from pipelines.positions import format_lsn, parse_lsn
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from pipelines.ingest.landed_metrics import INGEST
from pipelines.metrics import add_port_argument
from pipelines.metrics_collectors import serve_service

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
    add_port_argument(parser)
    parser.set_defaults(handler=_run)


def _lsn(text: str) -> int:
    try:
        return parse_lsn(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _run(args: argparse.Namespace, config: Config) -> int:
    serve_service(config, args.metrics_port, *INGEST)
    collect_rarely()
    stop = StopRequested()
    stop.install_signal_handlers()
    report = run_ingest(config, IngestOptions(args.until_idle, args.until_lsn), stop)
    log.info("ingested %d transactions (%d changes) in %.1f s; confirmed %s",
             report.transactions, report.changes, report.seconds,
             format_lsn(report.confirmed_lsn))
    return 0
