"""The Spark jobs a silver run starts on classic Spark: none when bronze has nothing new,
a fixed number for one table's batch. Each job is a fixed toll on a classic driver, so
the counts are pinned here; their seconds are bench/silver_bench's."""

from __future__ import annotations

import threading

import pytest

from pipelines.silver.job import run_silver
from pipelines.spark_jobs import GROUP, counted_jobs, map_in_threads
from tests.support.bronze_builder import Table
from tests.support.config import make_config
from tests.support.silver_changes import ITEMS, SNAP, items

pytestmark = pytest.mark.spark

BATCH_JOBS = 8  # one table's batch of updates and a delete into an existing table
UPDATE_JOBS = 7  # then one of updates only: its tombstones are left alone
CHUNK_JOBS = 11  # a new table's first batch: two backfill chunks and a change in a window
LATER_CHUNK_JOBS = 11  # a batch completing a chunk whose low watermark an earlier one read
HISTORY_JOBS = 9  # a new table's first batch of inserts, with its history table
HISTORY_UPDATE_JOBS = 18  # then a small batch of updates: one MERGE into each table
TWIN = Table("public.twins")  # ITEMS' shape under another name


@pytest.fixture
def classic(engine: str) -> None:
    if engine != "spark":
        pytest.skip("Spark Connect (Sail) has no job tracker; the Spark pass runs this")


def test_an_empty_run_starts_no_spark_job(classic, spark, lake, config):
    lake.append_changes([ITEMS.insert(10, i, id=i, name=f"n{i}", doc="d") for i in range(5)])
    run_silver(config, spark)
    with counted_jobs(spark) as empty:
        report = run_silver(config, spark)
    assert report.upto is None and report.tables == ()
    assert empty.jobs == 0


def test_one_table_s_batch_starts_a_fixed_number_of_jobs(classic, spark, lake, config):
    lake.append_changes([ITEMS.insert(10, i, id=i, name=f"n{i}", doc="d") for i in range(20)])
    run_silver(config, spark)
    lake.append_changes([ITEMS.update(11, i, id=i, name=f"m{i}", unchanged=["doc"])
                         for i in range(5)] + [ITEMS.delete(12, 0, id=7)])
    with counted_jobs(spark) as batch:
        report = run_silver(config, spark)
    assert [(t.table, t.updates, t.deletes) for t in report.tables] == [("public.items", 5, 1)]
    assert batch.jobs == BATCH_JOBS
    lake.append_changes([ITEMS.update(13, i, id=i, name=f"q{i}", unchanged=["doc"])
                         for i in range(5)])
    with counted_jobs(spark) as updates:
        run_silver(config, spark)
    assert updates.jobs == UPDATE_JOBS


def test_tables_applied_at_once_start_the_jobs_of_each(classic, spark, lake, config):
    """silver.parallel_tables: the tables' batches run in threads of their own, whose jobs
    count as the run's (they inherit its job group) and are each table's own."""
    assert config.silver.parallel_tables > 1
    for table in (ITEMS, TWIN):
        lake.append_changes([table.insert(10, i, id=i, name=f"n{i}", doc="d")
                             for i in range(20)])
    run_silver(config, spark)
    for table in (ITEMS, TWIN):
        lake.append_changes([table.update(11, i, id=i, name=f"m{i}", unchanged=["doc"])
                             for i in range(5)] + [table.delete(12, 0, id=7)])
    with counted_jobs(spark) as batch:
        report = run_silver(config, spark)
    assert [(t.table, t.updates, t.deletes) for t in report.tables] == [
        ("public.items", 5, 1), ("public.twins", 5, 1)]
    assert batch.jobs == 2 * BATCH_JOBS


def test_a_first_batch_of_backfill_chunks_starts_a_fixed_number_of_jobs(classic, spark, lake,
                                                                         config):
    lake.append_changes([ITEMS.watermark(18, 0, "b1", 1, "low"),
                         ITEMS.watermark(20, 0, "b1", 1, "high", SNAP, rows=2),
                         ITEMS.watermark(21, 0, "b1", 2, "low"),
                         ITEMS.update(21, 1, id=102, name="changed", doc="C102", xid=95),
                         ITEMS.watermark(22, 0, "b1", 2, "high", SNAP, rows=1)])
    lake.append_snapshots([ITEMS.chunk_row("b1", 1, 0, id=100, name="a", doc="P100"),
                           ITEMS.chunk_row("b1", 1, 1, id=101, name="b", doc="P101"),
                           ITEMS.chunk_row("b1", 2, 0, id=102, name="c", doc="P102")])
    with counted_jobs(spark) as first:
        report = run_silver(config, spark)
    assert [t.table for t in report.tables] == ["public.items"]
    assert first.jobs == CHUNK_JOBS
    assert items(spark, config) == [(100, "a", "P100"), (101, "b", "P101"),
                                    (102, "changed", "C102")]


def test_a_chunk_begun_in_an_earlier_batch_starts_no_job_to_find_its_low_watermark(
        classic, spark, lake, config):
    """The low watermark is older than the batch's bronze: it is read from the bronze files
    that hold watermarks (delta-rs statistics, pyarrow), not with a Spark job."""
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="n", doc="d"),
                         ITEMS.watermark(18, 0, "b1", 1, "low")])
    run_silver(config, spark)
    lake.append_changes([ITEMS.watermark(20, 0, "b1", 1, "high", SNAP, rows=2)])
    lake.append_snapshots([ITEMS.chunk_row("b1", 1, 0, id=100, name="a", doc="P100"),
                           ITEMS.chunk_row("b1", 1, 1, id=101, name="b", doc="P101")])
    with counted_jobs(spark) as later:
        report = run_silver(config, spark)
    assert [t.table for t in report.tables] == ["public.items"]
    assert later.jobs == LATER_CHUNK_JOBS
    assert items(spark, config) == [(1, "n", "d"), (100, "a", "P100"), (101, "b", "P101")]


def test_a_first_batch_with_history_starts_a_fixed_number_of_jobs(classic, spark, lake):
    """Silver, its tombstones (delta-rs: no job) and its history table, written with its
    first versions."""
    config = make_config(lake=lake.root, silver={"history": "*"})
    lake.append_changes([ITEMS.insert(10, i, id=i, name=f"n{i}", doc="d") for i in range(20)])
    with counted_jobs(spark) as first:
        report = run_silver(config, spark)
    assert [(t.table, t.inserts) for t in report.tables] == [("public.items", 20)]
    assert first.jobs == HISTORY_JOBS
    assert spark.read.format("delta").load(str(lake.root / "silver_history" / "public" / "items")
                                           ).filter("_is_current").count() == 20
    lake.append_changes([ITEMS.update(11, i, id=i, name=f"m{i}", unchanged=["doc"])
                         for i in range(5)])
    with counted_jobs(spark) as updates:
        run_silver(config, spark)
    assert updates.jobs == HISTORY_UPDATE_JOBS


def test_threads_of_a_run_share_its_job_group_and_nothing_they_set(classic, spark):
    """A statement keeps its execution's ids in its thread's local properties while it
    runs: a thread must not see another's, or a MERGE reads an id that thread removed."""
    both_set = threading.Barrier(2, timeout=60)
    both_read = threading.Barrier(2, timeout=60)

    def work(item: int) -> tuple[str | None, str | None]:
        context = spark.sparkContext
        if item == 0:
            context.setLocalProperty("lakehouse.test.owner", "thread 0")
        both_set.wait()
        seen = context.getLocalProperty("lakehouse.test.owner")
        both_read.wait()
        return seen, context.getLocalProperty(GROUP)

    with counted_jobs(spark) as run:
        seen = map_in_threads(spark, work, [0, 1], 2, "test")
    assert seen == [("thread 0", run.group), (None, run.group)]
