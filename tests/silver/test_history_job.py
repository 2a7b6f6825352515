"""History tables built by the silver job, on real Delta tables, on both engines."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipelines.positions import position_number
from pipelines.silver.job import run_silver
from tests.support.silver_changes import ITEMS, every_kind_of_change

pytestmark = pytest.mark.spark


def p(lsn: int, index: int = 0) -> int:
    return position_number((lsn, index))


def versions(spark, root, table="items", columns=("id", "name", "doc")):
    df = spark.read.format("delta").load(str(root / "silver_history" / "public" / table))
    return sorted((tuple(r) for r in df.select(
        *columns, "_valid_from", "_valid_to", "_is_current", "_op").collect()),
        key=lambda row: tuple((v is None, v) for v in row))


@pytest.fixture
def config(config):
    return replace(config, silver=replace(config.silver, history="*"))


def test_every_kind_of_change_makes_versions(spark, lake, config):
    every_kind_of_change(lake)
    run_silver(config, spark)
    assert versions(spark, lake.root) == [
        (1, "a", "D1", p(10), p(11), False, "insert"),
        (1, "a2", "D1", p(11), p(15), False, "update"),  # TOAST carried
        (1, "a2", None, p(15), None, True, "update"),
        (2, "b", "D2", p(10, 1), p(12), False, "insert"),  # deleted
        (2, "b2", "D2b", p(13), None, True, "insert"),  # inserted again
        (3, "c", "D3", p(10, 2), p(14), False, "insert"),  # its key changed
        (30, "c", "D3", p(14), None, True, "update"),
        (100, "old", "P100", p(20), None, True, "snapshot"),  # a backfill row
        (101, "new", "P101", p(19), None, True, "update"),  # the chunk filled the TOAST value
    ]
    assert versions(spark, lake.root, "members", ("project", "member", "role")) == [
        (1, 1, "owner", p(10, 3), p(16), False, "insert"),  # closed by the truncate
        (1, 2, "dev", p(10, 4), p(16), False, "insert"),
        (1, 3, "viewer", p(17), None, True, "insert"),
    ]
    silver = spark.read.format("delta").load(str(lake.root / "silver/public/items"))
    current = spark.read.format("delta").load(str(lake.root / "silver_history/public/items"))
    assert sorted(current.filter("_is_current").select(*silver.columns).collect()) == \
        sorted(silver.collect())
    before = versions(spark, lake.root)
    run_silver(config, spark)
    assert versions(spark, lake.root) == before


def test_batches_one_change_at_a_time_give_the_same_history(spark, lake, config, tmp_path):
    every_kind_of_change(lake)
    run_silver(config, spark)
    whole = versions(spark, lake.root)
    from tests.support.bronze_builder import BronzeLake
    from deltalake import DeltaTable
    other = BronzeLake(tmp_path / "other")
    rows = DeltaTable(str(lake.root / "bronze/changes")).to_pyarrow_table().to_pylist()
    snaps = DeltaTable(str(lake.root / "bronze/snapshots")).to_pyarrow_table().to_pylist()
    other.append_snapshots(snaps)
    config2 = replace(config, lake=replace(config.lake, path=str(other.root)))
    for lsn in sorted({r["commit_lsn"] for r in rows}):
        other.append_changes([r for r in rows if r["commit_lsn"] == lsn])
        run_silver(config2, spark)
    assert versions(spark, other.root) == whole


def test_untracked_columns_update_the_version_in_place(spark, lake, config):
    config = replace(config, silver=replace(config.silver,
                                            history_columns={"public.items": ("name",)}))
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a", doc="x"),
                         ITEMS.update(11, 0, id=1, name="a", doc="y"),
                         ITEMS.update(12, 0, id=1, name="b", unchanged=["doc"])])
    run_silver(config, spark)
    assert versions(spark, lake.root) == [(1, "a", "y", p(10), p(12), False, "insert"),
                                          (1, "b", "y", p(12), None, True, "update")]


def test_history_turned_on_later_starts_where_bronze_starts(spark, lake, config):
    every_kind_of_change(lake)
    run_silver(replace(config, silver=replace(config.silver, history=())), spark)
    assert not (lake.root / "silver_history").exists()
    run_silver(config, spark)  # the tables are rebuilt with their history
    assert versions(spark, lake.root)[0] == (1, "a", "D1", p(10), p(11), False, "insert")
    assert len(versions(spark, lake.root)) == 9
    history = lake.root / "silver_history/public/items"
    spark.read.format("delta").load(str(history)).limit(0).write.format("delta") \
        .mode("overwrite").save(str(history))  # lose it all ...
    run_silver(config, spark, rebuild=["items"])  # ... and rebuild it with the table
    assert len(versions(spark, lake.root)) == 9


def test_a_tracked_column_the_table_lacks_stops_the_table_before_any_write(spark, lake, config):
    config = replace(config, silver=replace(config.silver,
                                            history_columns={"public.items": ("nope",)}))
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a", doc="x")])
    report = run_silver(config, spark)
    assert "silver.history_columns of public.items: no column nope" in report.failed[0].error
    assert not (lake.root / "silver/public/items").exists()


def test_a_crash_before_the_progress_commit_rewrites_the_same_versions(spark, lake, config,
                                                                       crash_before_progress):
    every_kind_of_change(lake)
    run_silver(config, spark)
    lake.append_changes([ITEMS.delete(30, 0, id=1), ITEMS.update(31, 0, id=2, name="b3",
                                                                 unchanged=["doc"]),
                         ITEMS.insert(31, 1, id=7, name="g", doc="G")])
    with crash_before_progress():
        run_silver(config, spark)
    written = versions(spark, lake.root)
    assert (2, "b3", "D2b", p(31), None, True, "update") in written
    run_silver(config, spark)  # the same batch again: it finds its versions written
    assert versions(spark, lake.root) == written
    assert len([v for v in written if v[0] == 7]) == 1


def test_positions_past_a_64_bit_number_of_digits(spark, lake, config):
    """LSNs past 922,337,203 (about 880 MB of WAL) make positions wider than 64 bits."""
    from pipelines.silver.history import as_of

    big = 5_000_000_000
    lake.append_changes([ITEMS.insert(big, 0, id=1, name="a", doc="x"),
                         ITEMS.insert(big, 1, id=2, name="b", doc="y")])
    run_silver(config, spark)
    lake.append_changes([ITEMS.update(big + 1, 0, id=1, name="a2", unchanged=["doc"]),
                         ITEMS.truncate(big + 2, 0),
                         ITEMS.insert(big + 3, 0, id=3, name="c", doc="z")])
    run_silver(config, spark)
    assert versions(spark, lake.root) == [
        (1, "a", "x", p(big), p(big + 1), False, "insert"),
        (1, "a2", "x", p(big + 1), p(big + 2), False, "update"),
        (2, "b", "y", p(big, 1), p(big + 2), False, "insert"),
        (3, "c", "z", p(big + 3), None, True, "insert")]
    history = spark.read.format("delta").load(str(lake.root / "silver_history/public/items"))
    assert sorted(r.id for r in as_of(history, (big + 1, 0)).collect()) == [1, 2]
    assert [r.id for r in as_of(history, p(big + 3)).collect()] == [3]


def test_a_batch_of_only_a_truncate_closes_the_current_versions(spark, lake, config):
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a", doc="x")])
    run_silver(config, spark)
    lake.append_changes([ITEMS.truncate(11, 0)])  # no row of the table: no shape
    run_silver(config, spark)
    assert versions(spark, lake.root) == [(1, "a", "x", p(10), p(11), False, "insert")]
