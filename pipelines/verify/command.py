"""`lakehouse verify`'s command line, apart from the comparison (pipelines.verify.run) so
that the CLI loads on an install without an engine (docs/install.md)."""

from __future__ import annotations

import argparse

from pipelines.config import Config


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "verify", help="compare silver with the live source (exit 1 on any difference)",
        description="Wait until the ingest has confirmed the source's current WAL position "
        "and check silver has applied all of bronze; then compare every silver table with "
        "its source table row by row (one consistent source snapshot). Prints missing, "
        "extra and different keys. Exit 0: equal; 1: different or not caught up. Run it "
        "when the source is quiet: changes made during the comparison show as differences.")
    parser.add_argument("tables", nargs="*", metavar="TABLE",
                        help="schema.table (or a public table's name); default: all")
    parser.add_argument("--sample", type=int, default=10,
                        help="keys to list per kind of difference (default: %(default)s)")
    parser.add_argument("--wait", type=float, default=30.0, metavar="SECONDS",
                        help="how long to wait for the ingest to catch up (default: %(default)s)")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace, config: Config) -> int:
    from pipelines.engine import get_spark
    from pipelines.verify.run import NotCaughtUp, format_diffs, run_verify

    spark = get_spark(config)
    try:
        diffs = run_verify(config, spark, args.tables, args.sample, args.wait)
    except NotCaughtUp as exc:
        print(f"not verified: {exc}")
        return 1
    print(format_diffs(diffs))
    return 0 if all(d.equal for d in diffs) else 1
