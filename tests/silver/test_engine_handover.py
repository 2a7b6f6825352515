"""One lake, two engines: silver written by one engine is read, merged into and evolved by
the other, then by the first again (docs/architecture.md, Tables that work everywhere).

This process runs one engine (--engine); the other runs `lakehouse silver` in a process of
its own, as a job on another engine would. delta-rs (status, verify, maintenance) reads
what both wrote.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from pipelines.lake import read_delta
from pipelines.silver.tables import tombstones_path
from pipelines.silver.job import run_silver
from tests.support.bronze_builder import Table
from tests.support.cli import lakehouse
from tests.support.config import write_config
from tests.support.engines import CLASSIC_TEST_CONF
from tests.support.silver_changes import ITEMS, every_kind_of_change, items

pytestmark = pytest.mark.spark

WIDER = Table("public.items", ("id", "name", "doc", "note"), ("int4", "text", "text", "text"))
OTHER = {"local": "spark", "spark": "local"}  # config engine here -> the other one


def other_engine_silver(lake, engine: str) -> None:
    config = write_config(lake.root.parent / f"{engine}.yml", lake=lake.root, engine=engine,
                          spark={"master": "local[2]", "conf": CLASSIC_TEST_CONF})
    done = lakehouse(config, "silver", check=False)
    assert done.returncode == 0, done.stderr[-4000:]


def test_a_lake_is_continued_by_the_other_engine_and_back(spark, lake, config, config_engine):
    every_kind_of_change(lake)
    run_silver(config, spark)

    # The other engine: a new column (schema evolution), a delete, an update and the
    # second backfill chunk's high watermark.
    lake.append_changes([
        WIDER.insert(30, 0, id=7, name="seven", doc="D7", note="new column"),
        ITEMS.delete(31, 0, id=2),
        WIDER.update(32, 0, id=1, name="a3", doc="D1c", note="n1"),
        ITEMS.watermark(33, 0, "b1", 2, "high", {"xmin": 90, "xmax": 95, "xip": []}),
    ])
    other_engine_silver(lake, OTHER[config_engine])

    # Back on this engine: a TOAST value left unchanged, a delete of a row the other engine
    # wrote, and an insert of the key it deleted.
    lake.append_changes([
        WIDER.update(40, 0, id=7, name="seven2", note="n7", unchanged=["doc"]),
        ITEMS.delete(41, 0, id=30),
        WIDER.insert(42, 0, id=2, name="b4", doc="D2d", note=None),
    ])
    run_silver(config, spark)

    expected = [(1, "a3", "D1c", "n1"), (2, "b4", "D2d", None), (7, "seven2", "D7", "n7"),
                (100, "old", "P100", None), (101, "new", "P101", None),
                (102, "later", "P102", None)]
    silver = lake.root / "silver" / "public" / "items"
    df = spark.read.format("delta").load(str(silver))
    assert [tuple(r) for r in df.select("id", "name", "doc", "note").orderBy("id").collect()] \
        == expected
    assert items(spark, config) == [row[:3] for row in expected]
    # delta-rs reads the table both engines wrote, with the same rows: both merged with
    # deletion vectors, which each engine reads from the other
    assert sorted(read_delta(silver, ["id"]).column("id").to_pylist()) == \
        [row[0] for row in expected]
    assert DeltaTable(str(silver)).protocol().reader_features == ["deletionVectors"]
    assert DeltaTable(str(silver)).deletion_vectors().read_all().num_rows > 0
    marks = read_delta(tombstones_path(lake.layout, "public", "items"), ["id"])
    # a log of deletes: 2's stays after its insert (only older events are stale)
    assert sorted(marks.column("id").to_pylist()) == [2, 3, 30]
