"""`lakehouse status`: the CLI verb around print_status."""

from __future__ import annotations

import argparse

from pipelines.config import Config


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "status", help="replication lag and pipeline freshness",
        description="Report every layer: the replication slot (active, lag, WAL retained), "
        "bronze (last commit, landed position, newest change), silver per table (applied "
        "position, last run, error), backfills (progress) and gold (last refresh). The lake "
        "side is read with delta-rs (no Spark) and shown even when the source is down "
        "(exit 3 then).")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace, config: Config) -> int:
    from pipelines.status.report import print_status

    return print_status(config, as_json=args.json)
