"""`lakehouse run`: the CLI verb around run_pipeline."""

from __future__ import annotations

import argparse
import signal
import threading

from pipelines.config import Config
from pipelines.continuous.run import IngestProcess, run_pipeline
from pipelines.metrics import add_port_argument
from pipelines.metrics_collectors import serve_pipeline, watch_ingest


def add_parser(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "run", help="ingest, silver and gold together (local use)",
        description="Start the ingest as a child process and apply silver and gold as soon "
        "as bronze has new commits (at most once per silver.interval_seconds). Ctrl-C (or "
        "SIGTERM) stops the ingest cleanly, applies what it landed, and exits 0. Exits "
        "with the ingest's code if it fails.")
    add_port_argument(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace, config: Config) -> int:
    from pipelines.engine import get_spark

    overrides = serve_pipeline(config, args.metrics_port)
    # Started before the engine, right after its metrics port was chosen (so nothing else
    # takes the port meanwhile); stopped if the engine cannot start.
    ingest = IngestProcess(args.config, list(args.overrides) + overrides)
    if overrides:
        watch_ingest(lambda: ingest.running)
    try:
        spark = get_spark(config)
        # After the engine starts: the in-process Sail server stops itself on SIGINT unless
        # our handlers replace its own, and the last silver pass still needs it.
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        return run_pipeline(config, ingest, spark, stop)
    except BaseException:
        ingest.stop()
        raise
