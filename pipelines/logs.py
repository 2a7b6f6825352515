"""The process's log output: for a person at a terminal, a log file, or a log shipper.

`text` is rich's handler on an interactive terminal (it shares the stderr console with
the backfill's progress bars, so a record prints above live bars instead of through
them) and the plain line `HH:MM:SS LEVEL logger: message` elsewhere; `json` is one object
per line for jobs whose logs are shipped. Every handler redacts the environment's
credentials. The engines' own logs are kept to warnings unless -v.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pythonjsonlogger.json import JsonFormatter
from rich.logging import RichHandler

from pipelines.storage import RedactSecrets
from pipelines.terminal import stderr_console

LOG_FORMATS = ("text", "json")
LOG_FORMAT_ENV = "LAKEHOUSE_LOG_FORMAT"  # --log-format's default; children inherit it
PLAIN_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# Sail's warnings, less the one its actor system logs at every normal shutdown
# ("aborting N task(s) for SessionManagerActor").
SAIL_QUIET = "warn,sail_common::actor=error"
LOG4J2_QUIET = Path(__file__).with_name("log4j2-quiet.properties")
# Spark Connect, gRPC and py4j chatter is noise to a pipeline operator.
NOISY_LOGGERS = ("py4j", "pyspark", "grpc", "urllib3")


def configure_logging(verbose: bool = False, quiet: bool = False,
                      log_format: str = "text") -> None:
    """Root logging at INFO (-q WARNING, -v DEBUG) in `log_format`. A process whose
    logging is set up already (a test runner, a notebook) keeps its handlers."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format: got {log_format!r}, expected one of {LOG_FORMATS}")
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, handlers=[_handler(log_format)])
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())
    quiet_engines(verbose)


def quiet_engines(verbose: bool) -> None:
    """Engine logs at WARNING unless `verbose`, through the environment their processes
    read when they start; a setting of the user's own wins.

    The embedded Sail server logs through Rust's env_logger, which reads RUST_LOG once,
    when the process's first server starts (its default is info). Classic Spark's JVM
    reads log4j2's configuration file when it starts (Spark's default is INFO while it
    starts, then WARN, with notices); pipelines.jvm_output logs what it prints.
    """
    os.environ.setdefault("RUST_LOG", "info" if verbose else SAIL_QUIET)
    if verbose:
        return
    for noisy in NOISY_LOGGERS:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Classic Spark's JVM is started by spark-submit, which passes SPARK_SUBMIT_OPTS to it.
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "log4j2.configurationFile" not in options:  # unless the user chose a configuration
        os.environ["SPARK_SUBMIT_OPTS"] = f"{options} -Dlog4j2.configurationFile=" \
            f"{LOG4J2_QUIET.as_uri()}".strip()


def report(message: str) -> None:
    """A verb's closing message about what failed, on stderr: a line of its own, or with
    --log-format json one more record, so a log shipper parses every line (and
    credentials are redacted)."""
    if any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):
        logging.getLogger("lakehouse").error(message)
    else:
        print(message, file=sys.stderr)


def quiet_query_context_loggers() -> None:
    """PySpark logs every query the engine rejects as a JSON error record with its own
    handler (PySparkLogger, not propagated); the CLI reports that error itself, once.
    Called where a session exists: it imports PySpark."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _handler(log_format: str) -> logging.Handler:
    if log_format == "json":
        stderr_console().is_interactive = False  # only JSON lines: progress as records too
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter(
            "{levelname}{name}{message}", style="{", timestamp="time",
            rename_fields={"levelname": "level", "name": "logger", "exc_info": "exception"}))
        return handler
    console = stderr_console()
    if console.is_interactive:
        handler = RichHandler(console=console, show_path=False, log_time_format="%H:%M:%S",
                              rich_tracebacks=True)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        return handler
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(PLAIN_FORMAT, datefmt="%H:%M:%S"))
    return handler
