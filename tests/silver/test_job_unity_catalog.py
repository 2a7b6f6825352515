"""The silver job with engine databricks, run on Sail and on classic Spark: silver tables
are catalog tables with three-part names (`<catalog>`.`<silver_schema>`.`<name>`),
created, evolved, merged into and rebuilt through the same code as on Databricks;
bronze, progress and tombstones stay at their lake paths. The catalog is the session's
own (`sail` on Sail, `spark_catalog` on classic Spark); a workspace's would be Unity
Catalog's."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from bronze_builder import BronzeLake, Table
from test_job import EXPECTED_ITEMS, ITEMS, history

from pipelines.catalog import TableNames, read_table
from pipelines.config import DatabricksConfig, LakeConfig
from pipelines.silver.job import run_silver

pytestmark = pytest.mark.spark


@pytest.fixture
def unity(spark, config):
    """The lake's config with engine databricks and a fresh silver schema in the session's
    catalog."""
    suffix = uuid.uuid4().hex[:8]
    return replace(config, engine="databricks",
                   databricks=DatabricksConfig(spark.catalog.currentCatalog(), f"silver_{suffix}",
                                               f"gold_{suffix}", f"history_{suffix}"))


def table_rows(spark, name: str, *columns: str) -> list[tuple]:
    df = spark.table(name)
    return [tuple(r) for r in df.select(*(columns or df.columns)).orderBy(df.columns[0]).collect()]


def sorted_rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()),
                  key=lambda row: tuple((v is None, v) for v in row))


def test_the_same_bronze_gives_the_same_silver_by_path_and_by_name(spark, lake, config, unity,
                                                                   tmp_path):
    twin = BronzeLake(tmp_path / "twin")
    history(lake)
    history(twin)
    config = replace(config, silver=replace(config.silver, history="*"))
    unity = replace(unity, lake=LakeConfig(twin.root), silver=config.silver)
    by_path, by_name = run_silver(config, spark), run_silver(unity, spark)
    assert replace(by_name, seconds=0) == replace(by_path, seconds=0)
    paths, names = TableNames.from_config(config), TableNames.from_config(unity)
    assert len(sorted_rows(read_table(spark, names.silver("public", "items")))) == 5
    for table in ("items", "members"):
        assert names.silver("public", table).path is None
        assert names.history("public", table).parts[1].startswith("history_")
        for ref in ("silver", "tombstones", "history"):
            path_ref, name_ref = (getattr(n, ref)("public", table) for n in (paths, names))
            assert sorted_rows(read_table(spark, name_ref)) == \
                sorted_rows(read_table(spark, path_ref))


def test_a_databricks_run_writes_catalog_tables_and_keeps_state_at_paths(spark, lake, unity):
    history(lake)
    report = run_silver(unity, spark)
    assert report.upto == (21, 0) and not report.failed
    names = TableNames.from_config(unity)
    items, members = names.silver("public", "items").sql, names.silver("public", "members").sql
    assert table_rows(spark, items, "id", "name", "doc") == EXPECTED_ITEMS
    assert table_rows(spark, items)[-1][3:5] == (20, 0)  # at the high watermark
    assert [r[:5] for r in table_rows(spark, members)] == [(1, 3, "viewer", 17, 0)]
    assert not (lake.root / "silver").exists()  # no silver data under the lake
    marks = names.tombstones("public", "items").path
    assert [tuple(r)[:3] for r in spark.read.format("delta").load(str(marks)).collect()] == [
        (3, 14, 0)]
    assert (lake.root / "_state" / "silver_progress" / "_delta_log").is_dir()

    before = table_rows(spark, items)
    again = run_silver(unity, spark)
    assert again.tables == () and table_rows(spark, items) == before
    lake.append_changes([ITEMS.watermark(22, 0, "b1", 2, "high", {"xmin": 90, "xmax": 95,
                                                                  "xip": []}),
                         ITEMS.delete(23, 0, id=1)])
    run_silver(unity, spark)
    assert [r[:2] for r in table_rows(spark, items, "id", "name")] == [
        (2, "b2"), (30, "c"), (100, "old"), (101, "new"), (102, "later")]


def test_new_columns_widening_truncate_and_rebuild_of_catalog_tables(spark, lake, unity):
    narrow = Table(columns=("id", "name"), types=("int4", "text"))
    wide = Table(columns=("id", "name", "score"), types=("int4", "text", "int4"))
    wider = Table(columns=("id", "score"), types=("int8", "int8"))
    bad_before = Table("public.bad", ("id", "v"), ("int4", "int4"))
    bad_after = Table("public.bad", ("id", "v"), ("int4", "text"))
    lake.append_changes([narrow.insert(10, 0, id=1, name="a"), bad_before.insert(10, 1, id=1, v=5)])
    run_silver(unity, spark)
    lake.append_changes([wide.insert(11, 0, id=2, name="b", score=7)])
    assert run_silver(unity, spark).tables[0].columns_added == ("score",)
    lake.append_changes([wider.insert(12, 0, id=3000000000, score=2 ** 40),
                         bad_after.insert(12, 1, id=2, v="not a number")])
    report = run_silver(unity, spark)
    assert [t.table for t in report.failed] == ["public.bad"]
    assert [t.columns_widened for t in report.tables if not t.error] == [("id", "score")]
    names = TableNames.from_config(unity)
    items, bad = names.silver("public", "items").sql, names.silver("public", "bad").sql
    assert [(f.name, f.dataType.simpleString()) for f in spark.table(items).schema.fields] == [
        ("id", "bigint"), ("name", "string"), ("_lsn", "bigint"), ("_change_index", "bigint"),
        ("_commit_ts", "timestamp"), ("score", "bigint")]
    assert table_rows(spark, items, "id", "name", "score") == [
        (1, "a", None), (2, "b", 7), (3000000000, None, 2 ** 40)]

    rebuilt = run_silver(unity, spark, rebuild=["public.bad"])
    assert not rebuilt.failed
    assert spark.table(bad).schema["v"].dataType.simpleString() == "string"
    assert [r[:2] for r in table_rows(spark, bad)] == [(1, "5"), (2, "not a number")]

    bare = {**wider.truncate(13, 0), "columns": None, "type_names": None, "key_columns": None}
    lake.append_changes([bare])
    assert run_silver(unity, spark).tables[0].truncated
    assert table_rows(spark, items) == []


def test_source_tables_sharing_a_catalog_table_stop_instead_of_mixing(spark, lake, unity,
                                                                     config):
    flat = Table("public.sales_orders", ("id", "v"), ("int4", "text"))
    nested = Table("sales.orders", ("id", "v"), ("int4", "text"))
    other = Table("public.other", ("id",), ("int4",))
    lake.append_changes([flat.insert(10, 0, id=1, v="flat"), nested.insert(10, 1, id=1, v="nested"),
                         other.insert(10, 2, id=1)])
    report = run_silver(unity, spark)
    shared = f"{unity.databricks.catalog}.{unity.databricks.silver_schema}.sales_orders"
    assert {t.table: t.error for t in report.failed} == {
        "public.sales_orders": f"its silver table {shared} would also hold sales.orders; "
                               "leave all but one of them out of source.tables",
        "sales.orders": f"its silver table {shared} would also hold public.sales_orders; "
                        "leave all but one of them out of source.tables"}
    names = TableNames.from_config(unity)
    assert not spark.catalog.tableExists(names.silver("public", "sales_orders").sql)
    assert table_rows(spark, names.silver("public", "other").sql, "id") == [(1,)]

    one = replace(unity, source=replace(unity.source, tables=("public.sales_orders",
                                                              "public.other")))
    assert [t.table for t in run_silver(one, spark).tables] == ["public.sales_orders"]
    assert table_rows(spark, names.silver("public", "sales_orders").sql, "id", "v") == [
        (1, "flat")]  # with the other one left out of source.tables
    assert [(t.table, t.error) for t in run_silver(config, spark).tables] == [
        ("sales.orders", None)]  # by path the two tables do not clash


def test_catalog_tables_are_clustered_by_key_merged_on_read_and_optimized(spark, lake, unity,
                                                                         config_engine):
    if config_engine == "local":
        pytest.skip("Sail runs no layout SQL (conftest.unity_layout); the Spark pass runs this")
    unity = replace(unity, silver=replace(unity.silver, compact_files=2))
    history(lake)
    run_silver(unity, spark)
    lake.append_changes([ITEMS.delete(23, 0, id=1)])
    run_silver(unity, spark)
    items = TableNames.from_config(unity).silver("public", "items").sql
    detail = spark.sql(f"DESCRIBE DETAIL {items}").first()
    assert detail["clusteringColumns"] == ["id"]
    assert detail["properties"]["delta.enableDeletionVectors"] == "true"
    operations = [r["operation"] for r in spark.sql(f"DESCRIBE HISTORY {items}").collect()]
    assert "OPTIMIZE" in operations and "CLUSTER BY" in operations
    assert [r[:2] for r in table_rows(spark, items, "id", "name")][:2] == [(2, "b2"), (30, "c")]
