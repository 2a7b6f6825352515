"""`lakehouse sql`: one query on the configured engine, or a Spark Connect endpoint
serving the lake's tables to notebooks and other clients (docs/sql.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

from deltalake.exceptions import DeltaError
from obstore.exceptions import BaseError as ObstoreError

from pipelines.engine import engine_message, get_spark, query_errors, serve_session
from pipelines.errors import ConfigError, LakehouseError
from pipelines.logs import quiet_query_context_loggers
from pipelines.sql.output import FORMATS, STREAMED

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.config import Config

log = logging.getLogger(__name__)

DEFAULT_PORT = 15002  # Spark Connect's own default
DEFAULT_LIMIT = 1000  # rows of an aligned table or a Markdown table
REFRESH_SECONDS = 30.0  # a served session registers new tables this often


def add_parser(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = verbs.add_parser(
        "sql", help="query silver and gold with Spark SQL, or serve them to Spark Connect",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run one Spark SQL query on the configured engine and print its result.\n"
        "Every silver, history and gold table of the lake is there by the name analysts\n"
        "use on Databricks, less the catalog: <databricks.silver_schema>.<table>,\n"
        "<databricks.history_schema>.<table> and <databricks.gold_schema>.<report> (by\n"
        "default lakehouse_silver.users, lakehouse_history.users,\n"
        "lakehouse_gold.hours_per_project_per_day); a source table outside schema public\n"
        "is <schema>_<table>. With engine databricks, use the three-part names.\n"
        "A query the engine rejects is printed with the engine's message (exit 2).\n\n"
        "examples:\n"
        "  lakehouse sql \"SELECT count(*) FROM lakehouse_silver.users\"\n"
        "  lakehouse sql -f report.sql --format csv > report.csv\n"
        "  echo 'SHOW TABLES IN lakehouse_gold' | lakehouse sql\n"
        "  lakehouse sql --serve   # then SparkSession.builder.remote(URL) in a notebook")
    parser.add_argument("query", nargs="?",
                        help="the query (default: -f FILE, else standard input)")
    parser.add_argument("-f", "--file", type=Path, metavar="FILE",
                        help="read the query from FILE")
    parser.add_argument("--format", choices=tuple(FORMATS),
                        help="table: aligned, for people; csv, json (an array of objects) or "
                        "markdown, for tools and documents (default: table)")
    parser.add_argument("--limit", type=int, metavar="N",
                        help=f"at most N rows in a table or Markdown table (default: "
                        f"{DEFAULT_LIMIT}); csv and json stream every row")
    parser.add_argument("--serve", action="store_true",
                        help="instead of a query: open a Spark Connect endpoint on localhost "
                        "with the tables registered, print its URL and serve until Ctrl-C "
                        "(engines local and spark)")
    parser.add_argument("--port", type=int,
                        help=f"the endpoint's port with --serve (default: {DEFAULT_PORT})")
    parser.set_defaults(handler=handler)


def handler(args: argparse.Namespace, config: "Config") -> int:
    if args.serve:
        if args.query or args.file or args.format or args.limit is not None:
            raise ConfigError("--serve takes no query, --format or --limit")
        return serve(config, DEFAULT_PORT if args.port is None else args.port)
    if args.port is not None:
        raise ConfigError("--port: only with --serve")
    limit = DEFAULT_LIMIT if args.limit is None else args.limit
    if limit < 1:
        raise ConfigError(f"--limit: got {limit}, expected 1 or more")
    text = query_text(args.query, args.file)
    if not args.verbose:  # one question, one answer: the engine's start-up line is noise
        logging.getLogger("pipelines").setLevel(logging.WARNING)
    spark = get_spark(config)
    if not args.verbose:
        quiet_query_context_loggers()
    if config.engine != "databricks":  # Unity Catalog has them under their full names
        register_lake_tables(spark, config)
    run_query(spark, text, args.format or "table", limit, sys.stdout)
    return 0


def query_text(query: str | None, file: Path | None) -> str:
    """The query from the argument, the file or standard input, without a final `;`."""
    if query is not None and file is not None:
        raise ConfigError("give the query as an argument or with -f FILE, not both")
    if file is not None:
        try:
            text = file.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read the query file {file}: {exc.strerror}") from exc
    elif query is not None:
        text = query
    elif sys.stdin.isatty():
        raise ConfigError("no query: give one as an argument, with -f FILE or on stdin")
    else:
        text = sys.stdin.read()
    text = text.strip().rstrip(";").strip()
    if not text:
        raise ConfigError("the query is empty")
    return text


def run_query(spark: "SparkSession", text: str, output_format: str, limit: int,
              out: IO[str]) -> None:
    """Write the query's result to `out` in `output_format`: streamed for csv and json,
    else its first `limit` rows (a note on stderr says when there were more). A
    statement without a result (SET, CREATE VIEW) writes nothing. The engine's message
    for a rejected query becomes a ConfigError."""
    try:
        df = spark.sql(text)
        columns = list(df.columns)
        if not columns:
            return
        if output_format in STREAMED:
            for chunk in FORMATS[output_format](
                    columns, (tuple(row) for row in df.toLocalIterator())):
                out.write(chunk)
            return
        rows = [tuple(row) for row in df.limit(limit + 1).collect()]
        if len(rows) > limit:
            rows = rows[:limit]
            print(f"lakehouse sql: the first {limit:,} rows (--limit N for more; "
                  "--format csv or json streams every row)", file=sys.stderr)
        for chunk in FORMATS[output_format](columns, rows):
            out.write(chunk)
    except query_errors() as exc:
        raise ConfigError(f"the query failed: {engine_message(exc)}") from exc


def register_lake_tables(spark: "SparkSession", config: "Config") -> list:
    """The lake's silver and gold tables under analysts' names in `spark`'s catalog."""
    from pipelines.sql.tables import lake_tables, register

    return register(spark, lake_tables(config))


def serve(config: "Config", port: int) -> int:
    """Serve the tables on a Spark Connect endpoint until SIGINT or SIGTERM; the lake is
    listed again every REFRESH_SECONDS, so reports and tables built later appear too
    (and Sail's idle timeout never ends the shared session)."""
    spark, endpoint = serve_session(config, port)
    tables = register_lake_tables(spark, config)
    # After the engine starts: the in-process Sail server stops itself on SIGINT unless
    # these handlers replace its own.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"Spark Connect endpoint: {endpoint.url}")
    print(f"tables: {', '.join(t.name for t in tables) or '(none yet: run lakehouse silver)'}")
    print("attach: SparkSession.builder.remote(URL).getOrCreate(); Ctrl-C stops serving",
          flush=True)
    while not stop.wait(REFRESH_SECONDS):
        try:
            for table in register_lake_tables(spark, config):
                log.info("serving %s", table.name)
        except query_errors() as exc:
            if endpoint.session_id and endpoint.session_id in str(exc):
                raise LakehouseError(
                    f"the served session ended: {engine_message(exc)}. A client that calls "
                    "spark.stop() on a shared Sail session ends it for every client "
                    "(docs/sql.md); restart `lakehouse sql --serve`") from exc
            log.warning("could not register new tables (trying again in %.0f s): %s",
                        REFRESH_SECONDS, engine_message(exc))
        except (OSError, DeltaError, ObstoreError) as exc:
            log.warning("could not list the lake (trying again in %.0f s): %s",
                        REFRESH_SECONDS, exc)
    return 0
