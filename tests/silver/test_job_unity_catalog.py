"""The silver job with engine databricks, run on Sail and on classic Spark: silver tables
are catalog tables with three-part names (`<catalog>`.`<silver_schema>`.`<name>`),
created, evolved, merged into and rebuilt through the same code as on Databricks;
bronze, progress and tombstones stay at their lake paths. What only a catalog has is
here; tests/silver/test_job.py runs its BOTH_LAYOUTS tests with catalog tables too
(tests/support/layouts.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipelines.catalog import TableNames, read_table
from pipelines.config import LakeConfig
from pipelines.silver.job import run_silver
from tests.support.bronze_builder import BronzeLake, Table
from tests.support.config import make_config
from tests.support.silver_changes import ITEMS, every_kind_of_change

pytestmark = pytest.mark.spark


@pytest.fixture
def unity(lake, unity_catalog):
    """The lake's config with engine databricks and fresh schemas in the session's
    catalog."""
    return make_config(lake=lake.root, **unity_catalog)


def table_rows(spark, name: str, *columns: str) -> list[tuple]:
    df = spark.table(name)
    return [tuple(r) for r in df.select(*(columns or df.columns)).orderBy(df.columns[0]).collect()]


def sorted_rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()),
                  key=lambda row: tuple((v is None, v) for v in row))


def test_the_same_bronze_gives_the_same_silver_by_path_and_by_name(spark, lake, config, unity,
                                                                   tmp_path):
    twin = BronzeLake(tmp_path / "twin")
    every_kind_of_change(lake)
    every_kind_of_change(twin)
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
    every_kind_of_change(lake)
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
