"""`lakehouse demo`: the whole pipeline on embedded defaults, from an empty machine.

A local Postgres (wal_level=logical) under the work dir gets the time-tracking schema
and seed rows before the slot exists, so the backfill has real work. Then, at once: the
ingest (its own process, as in production), the DBLog backfill, a concurrent workload,
and silver applying what has landed every few seconds. After the workload stops, the
pipeline catches up, gold is built, silver is verified against the source, and the
reports and a timing summary are printed. Exit 0 only when verify found no difference.
The effective config is written to <workdir>/lakehouse.yml for the other verbs.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pyarrow.compute as pc
import yaml
from rich.text import Text

from pipelines.backfill.runner import BackfillOptions, run_backfill
from pipelines.config import CONFIG_ENV, DSN_ENV, Config, load_config
from pipelines.continuous.run import IngestProcess
from pipelines.errors import SourceError
from pipelines.demo.seed import create_schema, seed
from pipelines.demo.workload import run_workload
from pipelines.embedded_pg import EmbeddedPostgres, server_dir_for
from pipelines.engine import get_spark
from pipelines.extras import check_engine
from pipelines.gold.definitions import configured_reports
from pipelines.gold.display import format_gold_reports
from pipelines.gold.io import gold_io_for
from pipelines.gold.run import run_gold
from pipelines.lake import Lake, read_delta
from pipelines.metrics_collectors import serve_pipeline, watch_ingest
from pipelines.silver.job import run_silver
from pipelines.silver.trigger import Trigger
from pipelines.source.setup import run_setup
from pipelines.terminal import stdout_console
from pipelines.verify.run import format_diffs, run_verify, wait_for_ingest

log = logging.getLogger(__name__)

DEMO_PORT = 54329
DEMO_DB = "timetracking"
DEMO_REPORTS = Path(__file__).parent / "gold"  # the demo's gold reports, shipped in the package
DEMO_TABLES = ["public.users", "public.clients", "public.projects", "public.project_members",
               "public.time_entries", "public.scratch"]
# Tables that also keep every version of every row (silver/history.py): the notebooks
# show a time entry's versions and the tables as they were earlier in the run.
DEMO_HISTORY = ["public.time_entries", "public.project_members"]


@dataclass(frozen=True)
class DemoOptions:
    workdir: Path = Path(".lakehouse")
    rows: int = 20_000
    seconds: float = 20.0
    sessions: int = 3
    fresh: bool = False
    port: int = DEMO_PORT
    engine: str = "local"  # silver, gold and verify: local (Sail) or spark (classic + Delta)
    shape: str = "recent"  # the workload's: recent or uniform (pipelines.demo.workload)
    metrics_port: int | None = None  # Prometheus metrics while it runs (pipelines.metrics)


@dataclass
class Timings:
    """What the summary reports."""

    started: float = field(default_factory=time.monotonic)
    phases: dict[str, float] = field(default_factory=dict)
    backfilled_rows: int = 0
    backfill_seconds: float = 0.0
    backfills_skipped: int = 0
    bronze_before: int = 0
    workload_transactions: int = 0
    silver_seconds: list[float] = field(default_factory=list)  # runs during the workload
    freshness: float | None = None  # a probe's commit -> visible in silver, seconds

    def phase(self, name: str, since: float) -> None:
        self.phases[name] = time.monotonic() - since


def run_demo(options: DemoOptions) -> int:
    check_engine(options.engine)  # before a database or a lake exists
    workdir = options.workdir.resolve()
    server = EmbeddedPostgres(server_dir_for(workdir / "pg"), options.port)
    if options.fresh:
        server.stop()
        shutil.rmtree(server.data_dir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    timings = Timings()
    server.start()
    ingest = None
    try:
        config = write_config(workdir, server.dsn(DEMO_DB), options.engine)
        seeded = prepare_source(server, options.rows)
        report = run_setup(config.source, Lake.from_config(config))
        print(f"source: {len(report.tables)} tables, {seeded or 'existing'} rows seeded, "
              f"slot {config.source.slot} {'created' if report.slot_created else 'reused'}")
        timings.bronze_before = bronze_rows(config)
        # The demo's own source only: a LAKEHOUSE_SOURCE_DSN exported for a real pipeline
        # must not point the demo's ingest at (and consume) that database's slot.
        env = {k: v for k, v in os.environ.items() if k not in (DSN_ENV, CONFIG_ENV)}
        overrides = serve_pipeline(config, options.metrics_port)
        # At once: until the child listens on the port just chosen, another process may
        # take it (the `finally` stops the child if the engine cannot start).
        ingest = IngestProcess(workdir / "lakehouse.yml", overrides,
                               output=(workdir / "ingest.log").open("a"), env=env)
        if overrides:
            watch_ingest(lambda: ingest.running)
        spark = get_spark(config)
        concurrent_phase(config, spark, options, timings)
        timings.freshness = probe_freshness(config, spark)

        since = time.monotonic()
        wait_for_ingest(config, timeout=120)
        run_silver(config, spark)
        timings.phase("catch-up and final silver", since)
        since = time.monotonic()
        reports, gold_io = configured_reports(config), gold_io_for(config, spark)
        gold = run_gold(spark, gold_io, reports, parallel=config.gold.parallel_reports)
        timings.phase("gold", since)
        since = time.monotonic()
        diffs = run_verify(config, spark, wait_seconds=30)
        timings.phase("verify", since)
        if ingest.stop() != 0:
            log.warning("the ingest exited with %s: see ingest.log", ingest.process.returncode)

        print_results(format_gold_reports(spark, gold_io, reports, limit=5),
                      format_diffs(diffs), summary(config, timings, sum(gold.rows.values())))
        return 0 if all(d.equal for d in diffs) else 1
    finally:
        if ingest is not None and ingest.running:
            ingest.stop()
        server.stop()


def concurrent_phase(config: Config, spark, options: DemoOptions, timings: Timings) -> None:
    """Backfill and workload at once, while silver applies what has landed."""
    since = time.monotonic()
    results = {}

    def backfill() -> None:
        started = time.monotonic()
        results["backfill"] = run_backfill(config, BackfillOptions(
            chunk_size=config.backfill.chunk_size, parallel=2))
        timings.backfill_seconds = time.monotonic() - started

    def workload() -> None:
        results["workload"] = run_workload(config.source.dsn, options.rows, options.sessions,
                                           options.seconds, shape=options.shape)

    threads = [threading.Thread(target=backfill, name="backfill"),
               threading.Thread(target=workload, name="workload")]
    for thread in threads:
        thread.start()
    trigger, never = Trigger.from_config(config), threading.Event()
    while any(t.is_alive() for t in threads):
        if trigger.due(never):
            timings.silver_seconds.append(run_silver(config, spark).seconds)
            trigger.ran(True)
    for thread in threads:
        thread.join()
    timings.backfilled_rows = sum(r.rows for r in results.get("backfill", []))
    timings.backfills_skipped = sum(r.status == "skipped" for r in results.get("backfill", []))
    failed = [r for r in results.get("backfill", []) if r.status == "failed"]
    if failed:
        raise failed[0].error
    timings.workload_transactions = results["workload"].transactions
    timings.phase("backfill + workload + silver", since)


def bronze_rows(config: Config) -> int:
    path = Lake.from_config(config).bronze_changes
    return read_delta(path, ["op"]).num_rows if path.exists() else 0


def probe_freshness(config: Config, spark, timeout: float = 120) -> float:
    """Seconds from committing a marker row in the source to seeing it in silver."""
    marker = f"probe {time.time_ns()}"
    committed = time.monotonic()
    with psycopg.connect(config.source.dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO scratch (id, note) VALUES (0, %s) "
                     "ON CONFLICT (id) DO UPDATE SET note = excluded.note", (marker,))
    path = Lake.from_config(config).silver("public", "scratch")
    while time.monotonic() - committed < timeout:
        run_silver(config, spark, tables=["public.scratch"])
        if path.exists() and read_delta(
                path, ["note"], filter=pc.field("note") == marker).num_rows:
            return time.monotonic() - committed
        time.sleep(0.1)
    raise SourceError(f"the freshness probe did not reach silver in {timeout:.0f} s: "
                      "see ingest.log")


def write_config(workdir: Path, dsn: str, engine: str = "local") -> Config:
    """The demo's config file, usable with every verb while the demo server runs."""
    path = workdir / "lakehouse.yml"
    path.write_text(yaml.safe_dump({
        "source": {"dsn": dsn, "slot": "lakehouse", "publication": "lakehouse",
                   "tables": DEMO_TABLES},
        "lake": {"path": "lake"},
        "engine": engine,
        "ingest": {"batch_seconds": 0.5, "status_interval_seconds": 5},
        "backfill": {"chunk_size": 5000},
        "silver": {"history": DEMO_HISTORY},
        "gold": {"reports": str(DEMO_REPORTS)},
    }, sort_keys=False))
    return load_config(path, environ={})


def prepare_source(server: EmbeddedPostgres, rows: int) -> int:
    """Create the demo database and seed it, once; returns the rows seeded (0 if existing)."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DEMO_DB,)).fetchone():
            return 0
        conn.execute(f"CREATE DATABASE {DEMO_DB}")
    with psycopg.connect(server.dsn(DEMO_DB)) as conn:
        create_schema(conn)
        counts = seed(conn, rows)
    log.info("seeded the demo source: %s", counts)
    return sum(counts.values())


def summary(config: Config, timings: Timings, gold_rows: int) -> list[tuple[str, str]]:
    """The summary's (what, how much) rows."""
    landed = bronze_rows(config) - timings.bronze_before
    concurrent = timings.phases.get("backfill + workload + silver", 0.0)
    if timings.backfills_skipped and not timings.backfilled_rows:
        backfill = f"already done in an earlier run ({timings.backfills_skipped} tables)"
    else:
        rate = timings.backfilled_rows / max(timings.backfill_seconds, 1e-9)
        backfill = (f"{timings.backfilled_rows:,} rows in {timings.backfill_seconds:.1f} s "
                    f"({rate:,.0f} rows/s)")
    rows = [("backfill", backfill),
            ("workload", f"{timings.workload_transactions:,} transactions"),
            ("ingest", f"{landed:,} changes into bronze ({landed / max(concurrent, 1e-9):,.0f}"
                       " changes/s while the workload ran)")]
    if timings.silver_seconds:
        rows.append(("silver", f"{len(timings.silver_seconds)} incremental runs during the "
                               f"workload, median {statistics.median(timings.silver_seconds):.1f} s"))
    if timings.freshness is not None:
        rows.append(("freshness", f"{timings.freshness:.1f} s from a source commit to silver"))
    rows += [(name, f"{seconds:.1f} s") for name, seconds in timings.phases.items()]
    rows += [("gold rows written", f"{gold_rows:,}"),
             ("total", f"{time.monotonic() - timings.started:.1f} s")]
    return rows


def print_results(reports: str, diffs: str, summary_rows: list[tuple[str, str]]) -> None:
    """Reports, verify's result and the summary on stdout: headings and the summary's
    names in bold on a terminal, the same text without styles elsewhere."""
    console = stdout_console()
    console.print(reports, markup=False, highlight=False, soft_wrap=True)  # tables stay whole
    console.print()
    console.print("verify (silver vs the source):", style="bold", markup=False)
    console.print(diffs, markup=False, highlight=False)
    console.print()
    console.print("summary:", style="bold", markup=False)
    width = max(len(name) for name, _ in summary_rows) + 2
    for name, value in summary_rows:
        console.print(Text.assemble("  ", (name.ljust(width), "bold"), value))
