"""History tables over a real pipeline run: the demo's schema, seed and workload (the
backfill running while it writes), with history on for time_entries and project_members.
The source read in a REPEATABLE READ snapshot mid-way, with the writers paused, is what
`as_of` gives for the snapshot's WAL position and for its time; the current versions
are silver, and silver is the source."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Sequence

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.backfill.runner import BackfillOptions, run_backfill
from pipelines.config import Config, parse_config
from pipelines.demo.run import DEMO_TABLES
from pipelines.demo.workload import Session, WorkloadStats
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from pipelines.lake import Lake
from pipelines.positions import position_number
from pipelines.silver.history import HISTORY_COLUMNS, IS_CURRENT, VALID_FROM, VALID_TO, as_of
from pipelines.silver.job import run_silver
from pipelines.source.setup import run_setup
from pipelines.source.text_format import with_text_format
from pipelines.status.report import lake_status, status_lines
from pipelines.verify.run import Scratch, differences, source_snapshot
from tests.support.demo import seeded

pytestmark = [pytest.mark.postgres, pytest.mark.spark]  # on Sail and on classic Spark

ROWS = 1000  # seeded time entries
HISTORY = ("public.time_entries", "public.project_members")
KEYS = {"public.time_entries": ["id"], "public.project_members": ["project_id", "user_id"]}


class Writers:
    """The demo workload's sessions, paused and resumed at will: `pause` returns once
    every transaction in flight has committed or rolled back."""

    def __init__(self, dsn: str, rows: int, sessions: int = 3, seed: int = 11) -> None:
        self.stats = WorkloadStats()
        self.sessions = [Session(dsn, rows, seed + i, self.stats) for i in range(sessions)]
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def _run(self, session: Session, stop: threading.Event) -> None:
        try:
            session.run(stop)
        except BaseException as exc:  # raised again by pause(), in the test's thread
            self.errors.append(exc)

    def resume(self) -> None:
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(s, self.stop))
                        for s in self.sessions]
        for thread in self.threads:
            thread.start()

    def pause(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        if self.errors:
            raise self.errors[0]

    def run_for(self, seconds: float) -> None:
        self.resume()
        time.sleep(seconds)
        self.pause()


@dataclass(frozen=True)
class Moment:
    """The source as one REPEATABLE READ snapshot saw it."""

    lsn: int  # pg_current_wal_lsn() in the snapshot
    at: datetime  # the snapshot transaction's now()
    rows: dict[str, DataFrame]  # table -> its rows, typed as silver types them


def read_source(spark: SparkSession, config: Config, scratch: Scratch) -> Moment:
    """The history tables' source rows in one snapshot, with its WAL position and time
    (the rows land in `scratch` as Parquet, so the frames outlive the snapshot)."""
    with psycopg.connect(with_text_format(config.source.dsn), autocommit=True) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        lsn, at = conn.execute(
            "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint, now()").fetchone()
        rows = {table: source_snapshot(spark, conn, table, config.source.publication,
                                       scratch.child(table))[0] for table in HISTORY}
        conn.execute("COMMIT")
    return Moment(int(lsn), at, rows)


def catch_up(config: Config, spark: SparkSession) -> None:
    run_ingest(config, IngestOptions(until_idle=0.5), StopRequested())
    run_silver(config, spark)


def assert_same_rows(actual: DataFrame, expected: DataFrame, keys: Sequence[str],
                     columns: Sequence[str]) -> None:
    """The same rows, key by key, in `columns` (null-safe, as verify compares)."""
    found = (differences(expected.select(*columns), actual.select(*columns), keys, columns)
             .orderBy("kind", "key").limit(10).collect())
    assert [(r["kind"], r["key"]) for r in found] == []
    assert actual.count() == expected.count()  # a key twice in `actual` would hide above


@pytest.fixture
def pipeline(source_dsn: str, tmp_path: Path, config_engine: str) -> Config:
    """The demo's tables, seeded, with the publication and the slot: ready to backfill."""
    seeded(source_dsn, ROWS)
    config = parse_config({
        "source": {"dsn": source_dsn, "tables": DEMO_TABLES},
        "lake": {"path": str(tmp_path / "lake")}, "engine": config_engine,
        "ingest": {"batch_seconds": 0.2}, "silver": {"history": list(HISTORY)}}, tmp_path, {})
    run_setup(config.source, Lake.from_config(config))
    return config


@pytest.mark.long
def test_history_as_of_a_snapshot_mid_way_is_that_snapshot(pipeline, spark, tmp_path):
    config, lake = pipeline, Lake.from_config(pipeline)
    writers = Writers(config.source.dsn, ROWS)
    writers.resume()  # the backfill runs while the workload writes, as in the demo
    results = run_backfill(config, BackfillOptions(chunk_size=100))
    time.sleep(0.5)
    writers.pause()
    assert {r.status for r in results} == {"done"}
    catch_up(config, spark)  # a first silver batch: the moment falls inside the second
    writers.run_for(1.5)
    time.sleep(0.01)  # the last commit's timestamp is before the snapshot's now()
    moment = read_source(spark, config, Scratch(Lake.of(tmp_path / "scratch"), "moment"))
    time.sleep(0.01)  # the next commit's timestamp is after it
    writers.run_for(1.5)
    catch_up(config, spark)
    assert writers.stats.transactions > 50

    final = read_source(spark, config, Scratch(Lake.of(tmp_path / "scratch"), "final"))
    position = position_number((moment.lsn, 0))
    for table in HISTORY:
        schema, name = table.split(".")
        keys, columns = KEYS[table], final.rows[table].columns
        history = spark.read.format("delta").load(lake.silver_history(schema, name).uri)
        silver = spark.read.format("delta").load(lake.silver(schema, name).uri)
        current = history.filter(F.col(IS_CURRENT)).drop(*HISTORY_COLUMNS)
        assert_same_rows(current, silver, keys, columns)
        assert_same_rows(silver, final.rows[table], keys, columns)
        assert_same_rows(as_of(history, (moment.lsn, 0)), moment.rows[table], keys, columns)
        assert_same_rows(as_of(history, moment.at), moment.rows[table], keys, columns)
        # not a vacuous moment: versions were closed before it and opened after it
        assert history.filter(F.col(VALID_TO) <= position).count() > 0, table
        assert history.filter(F.col(VALID_FROM) > position).count() > 0, table
    assert [t for t in DEMO_TABLES if t not in HISTORY  # the others keep none
            and lake.silver_history(*t.split(".")).exists()] == []

    status = lake_status(config)  # what `lakehouse status` says of them
    assert {t for t, info in status.silver.items() if info["history_written_at"]} == \
        set(HISTORY)
    lines = status_lines(config, None, OSError("not asked"), status, [])
    assert [line.split(":")[0] for line in lines if "history written" in line] == \
        [f"silver {table}" for table in sorted(HISTORY)]
