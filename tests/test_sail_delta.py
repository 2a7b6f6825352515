"""The local engine does the Delta operations the pipeline relies on (DESIGN.md, Engines)."""

import pytest
from deltalake import DeltaTable

from pipelines.lake import read_delta


@pytest.fixture
def sail(spark, engine):
    if engine != "sail":  # classic and Connect sessions cannot share a process
        pytest.fail("run this module with --engine sail (the default)")
    return spark


def test_delta_write_read_and_conditional_merge(sail, tmp_path):
    path = str(tmp_path / "t")
    sail.createDataFrame([(1, "a", 5), (2, "b", 5)], "id long, v string, pos long") \
        .write.format("delta").save(path)
    sail.createDataFrame([(1, "new", 9), (2, "stale", 1), (3, "c", 7)],
                         "id long, v string, pos long").createOrReplaceTempView("changes")
    sail.sql(f"CREATE TABLE rt USING delta LOCATION '{path}'")
    sail.sql("MERGE INTO rt USING changes c ON rt.id = c.id "
             "WHEN MATCHED AND c.pos > rt.pos THEN UPDATE SET * "
             "WHEN NOT MATCHED THEN INSERT *")
    rows = sorted(tuple(r) for r in sail.read.format("delta").load(path).collect())
    assert rows == [(1, "new", 9), (2, "b", 5), (3, "c", 7)]
    # delta-rs reads what Sail wrote: bronze and maintenance use delta-rs on the same tables
    assert DeltaTable(path).version() == 1
    assert sorted(read_delta(path, ["id"]).column("id").to_pylist()) == [1, 2, 3]
