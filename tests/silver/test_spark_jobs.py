"""The Spark jobs a silver run starts on classic Spark: none when bronze has nothing new,
a fixed number for one table's batch. Each job is a fixed toll on a classic driver, so
the counts are pinned here; their seconds are bench/silver_bench's."""

from __future__ import annotations

import pytest

from pipelines.silver.job import run_silver
from pipelines.spark_jobs import counted_jobs
from tests.support.silver_changes import ITEMS

pytestmark = pytest.mark.spark

BATCH_JOBS = 39  # one table's batch of updates and a delete into an existing table
UPDATE_JOBS = 32  # then one of updates only: its tombstones are left alone


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
