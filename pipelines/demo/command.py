"""`lakehouse demo`: the CLI verb around run_demo."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipelines.metrics import add_port_argument


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "demo", help="run the pipeline end to end on embedded defaults",
        description="Start an embedded Postgres with a time-tracking schema and seed rows "
        "under --workdir, set up replication, then run the ingest, the backfill, a concurrent "
        "workload and silver together; catch up, build gold, verify silver against the "
        "source, print the reports and a timing summary. Exit 0 only if verify passed. "
        "Needs no --config. Writes WORKDIR/lakehouse.yml: with it the lake-side verbs "
        "(status, silver, gold) work on the demo lake afterwards; the demo's Postgres is "
        "stopped at the end. A second run without --fresh continues from the existing "
        "database and lake.")
    parser.add_argument("--workdir", type=Path, default=Path(".lakehouse"),
                        help="where the demo keeps its Postgres data and lake (default: "
                        "%(default)s)")
    parser.add_argument("--rows", type=int, default=20_000,
                        help="time entries seeded before the slot exists (default: "
                        "%(default)s)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long the concurrent workload runs (default: %(default)s)")
    parser.add_argument("--shape", choices=("recent", "uniform"), default="recent",
                        help="the workload's shape: recent (new entries, edits and deletes "
                        "of the newest 1%%, as in a real time tracker) or uniform (edits and "
                        "deletes anywhere) (default: %(default)s)")
    parser.add_argument("--fresh", action="store_true",
                        help="delete the demo database and lake first")
    parser.add_argument("--port", type=int, default=54329,
                        help="port of the embedded Postgres (default: %(default)s)")
    parser.add_argument("--engine", choices=("local", "spark"), default="local",
                        help="where silver, gold and verify run: local (Sail, embedded) or "
                        "spark (classic Spark with Delta Lake, local[*]; needs Java 17+, "
                        "fetches delta-spark from Maven Central on first use) "
                        "(default: %(default)s)")
    add_port_argument(parser, None, "while it runs (for a look at the metrics `lakehouse run` "
                      "serves; a longer --seconds leaves time to scrape): ")
    parser.set_defaults(handler=_run, needs_config=False)


def _run(args: argparse.Namespace, config: None) -> int:
    from pipelines.demo.run import DemoOptions, run_demo

    return run_demo(DemoOptions(workdir=args.workdir, rows=args.rows, seconds=args.seconds,
                                fresh=args.fresh, port=args.port, engine=args.engine,
                                shape=args.shape, metrics_port=args.metrics_port))
