"""`lakehouse`: the command line. Thin: parse, load config, call the verb's run function.

Exit codes (docs/architecture.md): 0 ok, 1 verification difference, 2 usage/config error,
3 source problem, 4 data error, 5 lake storage error.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import sys
from typing import Callable, Sequence

import psycopg
from deltalake.exceptions import DeltaError
from obstore.exceptions import BaseError as ObstoreError

from pipelines.config import CONFIG_ENV, DSN_ENV, Config, load_config
from pipelines.errors import ConfigError, LakehouseError, SourceError, StorageError
from pipelines.extras import install_hint
from pipelines.logs import LOG_FORMAT_ENV, LOG_FORMATS, configure_logging, report
from pipelines.storage import redact

log = logging.getLogger("lakehouse")
BROKEN_PIPE_EXIT = 141  # as a process killed by SIGPIPE reports it (128 + 13)

# Each verb is its package's `command` module: add_parser(verbs) registers a subparser
# whose defaults carry handler(args, config) -> exit code. In the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "pipelines.source.command",  # setup
    "pipelines.status.command",
    "pipelines.demo.command",
    "pipelines.ingest.command",
    "pipelines.backfill.command",
    "pipelines.silver.command",
    "pipelines.gold.command",
    "pipelines.verify.command",
    "pipelines.recover.command",
    "pipelines.continuous.command",  # run
    "pipelines.sql.command",
)

DESCRIPTION = f"""\
Postgres change data capture into a Delta Lake lakehouse.

  Postgres --pgoutput slot--> ingest --> bronze (Delta change log)
  bronze --Spark MERGE--> silver (current state) --Spark SQL--> gold (reports)

Configuration is one YAML file (--config PATH or ${CONFIG_ENV}); the source DSN
may come from ${DSN_ENV} so no password sits in a file.
Exit codes: 0 ok, 1 verify found differences, 2 usage or config error,
3 source problem (unreachable, wal_level, slot, privileges), 4 corrupt data,
5 lake storage problem (unreachable, credentials, refused request)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakehouse", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="PATH",
                        help=f"YAML config file (default: ${CONFIG_ENV})")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="SECTION.KEY=VALUE",
                        help="override one config setting, e.g. --set lake.path=/Volumes/x "
                        "(repeatable; used by the Databricks jobs to pass bundle variables)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug log output, including the engine's own (Sail, Spark "
                        "Connect, gRPC)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    parser.add_argument("--log-format", choices=LOG_FORMATS,
                        default=os.environ.get(LOG_FORMAT_ENV) or "text",
                        help="text (rich on a terminal, plain lines elsewhere) or json (one "
                        f"object per line, for shipped logs) (default: ${LOG_FORMAT_ENV} or "
                        "%(default)s)")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).add_parser(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_format not in LOG_FORMATS:  # argparse checks a flag's value, not its default
        parser.error(f"${LOG_FORMAT_ENV}: got {args.log_format!r}, expected text or json")
    configure_logging(args.verbose, args.quiet, args.log_format)
    os.environ[LOG_FORMAT_ENV] = args.log_format  # child processes log the same way
    handler: Callable[[argparse.Namespace, Config], int] = args.handler
    config = None
    try:
        config = (load_config(args.config, overrides=args.overrides)
                  if getattr(args, "needs_config", True) else None)
        return handler(args, config)
    except ModuleNotFoundError as exc:  # an extra this install lacks (docs/install.md)
        hint = install_hint(exc.name, config.engine if config else getattr(args, "engine", None))
        if hint is None:
            raise
        report(f"lakehouse {args.verb}: error: {hint}")
        return ConfigError.exit_code
    except LakehouseError as exc:
        log.debug("failed", exc_info=True)
        report(f"lakehouse {args.verb}: error: {exc}")
        return exc.exit_code
    except BrokenPipeError:  # the reader of stdout left (`lakehouse sql ... | head`)
        # Python's advice: point stdout at devnull so the exit's flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    except (OSError, DeltaError, ObstoreError) as exc:  # the lake's store, most often
        log.debug("failed", exc_info=True)
        first = redact(str(exc).strip()).splitlines()[0] if str(exc).strip() else ""
        report(f"lakehouse {args.verb}: lake storage error: {type(exc).__name__}: "
               f"{first} (check lake.path, lake.storage_options and the store's credentials "
               "in the environment; docs/storage.md)")
        return StorageError.exit_code
    except psycopg.Error as exc:  # a database error no layer turned into a clearer one
        log.debug("failed", exc_info=True)
        report(f"lakehouse {args.verb}: source error: {type(exc).__name__}: "
               f"{str(exc).strip()}")
        return SourceError.exit_code
    except KeyboardInterrupt:
        report(f"lakehouse {args.verb}: interrupted")
        return 130


def entry() -> None:
    """The `lakehouse` command: main(), then an exit that skips native teardown.

    Now and then a native library's static destructors abort the interpreter after
    everything was done and printed ("terminate called without an active exception",
    seen rarely after `status` on S3), turning exit 0 into SIGABRT for the caller's
    script. Python's own exit handlers still run (temporary directories, engine
    shutdown); only the C++ teardown after them is skipped. On Databricks the task runs
    in the driver's Python process, which is not ours to end: a plain exit there.
    """
    code = main()
    if "DATABRICKS_RUNTIME_VERSION" in os.environ or code == BROKEN_PIPE_EXIT:
        # After a reader left early, running the exit handlers from here hangs (the
        # engine's result stream is still open); the interpreter's own shutdown does not.
        sys.exit(code)
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
