"""The Delta operations the pipeline relies on, on Sail and on Spark with delta-spark, and
each difference between the two that the pipeline has to live with, pinned
(docs/architecture.md, Portability rules)."""

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

from pipelines.lake import read_delta

pytestmark = pytest.mark.spark


def commits(path: Path) -> list[dict]:
    """The actions of each commit in the table's log, by version."""
    return [[json.loads(line) for line in log.read_text().splitlines()]
            for log in sorted((path / "_delta_log").glob("*.json"))]


def test_delta_write_read_and_conditional_merge(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, "a", 5), (2, "b", 5)], "id long, v string, pos long") \
        .write.format("delta").save(path)
    spark.createDataFrame([(1, "new", 9), (2, "stale", 1), (3, "c", 7)],
                          "id long, v string, pos long").createOrReplaceTempView("changes")
    spark.sql(f"CREATE TABLE rt USING delta LOCATION '{path}'")
    spark.sql("MERGE INTO rt USING changes c ON rt.id = c.id "
              "WHEN MATCHED AND c.pos > rt.pos THEN UPDATE SET * "
              "WHEN NOT MATCHED THEN INSERT *")
    rows = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    assert rows == [(1, "new", 9), (2, "b", 5), (3, "c", 7)]
    # delta-rs reads what the engine wrote: bronze and maintenance use delta-rs on the
    # same tables
    assert DeltaTable(path).version() == 1
    assert sorted(read_delta(path, ["id"]).column("id").to_pylist()) == [1, 2, 3]


def test_new_tables_need_no_table_feature(spark, tmp_path):
    """Reader 1 / writer 2 on both engines: every engine and delta-rs can continue them."""
    path = tmp_path / "t"
    spark.createDataFrame([(1, "a")], "id long, v string").write.format("delta").save(str(path))
    protocol = DeltaTable(str(path)).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    assert not protocol.reader_features and not protocol.writer_features


def test_a_stale_replay_rewrites_matched_files_only_on_delta_spark(spark, engine, tmp_path):
    """Difference: a MERGE shaped like silver's (matched clauses guarded by position) whose
    source rows all match but are stale changes no row on either engine. delta-spark
    still rewrites the files its join touched (same rows: an add and a remove), Sail
    commits nothing. So checks of "nothing changed" compare rows, never table versions."""
    path = tmp_path / "t"
    spark.createDataFrame([(1, "a", 5), (2, "b", 5)], "id long, v string, pos long") \
        .write.format("delta").save(str(path))
    spark.createDataFrame([(1, "stale", 3, "U"), (2, "stale", 4, "D")],
                          "id long, v string, pos long, op string") \
        .createOrReplaceTempView("replay")
    spark.sql(f"MERGE INTO delta.`{path}` t USING replay s ON t.id = s.id "
              "WHEN MATCHED AND s.op = 'D' AND s.pos > t.pos THEN DELETE "
              "WHEN MATCHED AND s.op = 'U' AND s.pos > t.pos THEN UPDATE SET v = s.v, pos = s.pos "
              "WHEN NOT MATCHED AND s.op = 'U' THEN INSERT (id, v, pos) VALUES (s.id, s.v, s.pos)"
              ).collect()
    rows = sorted(tuple(r) for r in spark.read.format("delta").load(str(path)).collect())
    assert rows == [(1, "a", 5), (2, "b", 5)]
    log = commits(path)
    assert len(log) == {"sail": 1, "spark": 2}[engine]
    if engine == "spark":
        assert {key for action in log[1] for key in action} >= {"add", "remove"}


def test_the_session_catalog_is_named_differently(spark, engine):
    """Difference: three-part names start with `sail` on Sail and `spark_catalog` on
    Spark; the pipeline takes the catalog from the config (Unity Catalog on Databricks)
    and the tests from spark.catalog.currentCatalog()."""
    assert spark.catalog.currentCatalog() == {"sail": "sail", "spark": "spark_catalog"}[engine]


def test_a_replace_where_condition_that_is_null_replaces_the_row_only_on_sail(
        spark, engine, tmp_path):
    """Difference: a selective overwrite replaces the rows its condition holds for. Where
    the condition is NULL (a NULL group in `g IN (1)`) Sail replaces the row too, Delta
    keeps it. So every such condition the pipeline writes is never NULL
    (gold.refresh.in_groups)."""
    path = str(tmp_path / "t")
    spark.createDataFrame([(1, 10), (2, 20), (None, 30)], "g long, v long") \
        .write.format("delta").save(path)
    spark.createDataFrame([(1, 11)], "g long, v long").write.format("delta") \
        .mode("overwrite").option("replaceWhere", "g IN (1)").save(path)
    rows = sorted((tuple(r) for r in spark.read.format("delta").load(path).collect()),
                  key=repr)
    kept = {"sail": [(1, 11), (2, 20)], "spark": [(1, 11), (2, 20), (None, 30)]}[engine]
    assert rows == sorted(kept, key=repr)
