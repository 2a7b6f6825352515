import pytest

from pipelines.silver.toast import fill_unchanged_toast
from tests.support.bronze_builder import assert_frames

pytestmark = pytest.mark.spark

EVENTS = ("id string, name string, doc string, _lsn long, _change_index long, "
          "_cdc_op string, _cdc_unchanged array<string>, _cdc_old_key struct<id:string>")
COLUMNS = ["name", "doc"]


def test_unchanged_values_come_from_the_latest_earlier_event_of_the_key(spark):
    events = spark.createDataFrame([
        # 1: INSERT then a partial UPDATE in one batch (arriving out of order)
        ("1", "b", None, 20, 0, "upsert", ["doc"], None),
        ("1", "a", "D1", 10, 0, "upsert", [], None),
        # 2: a chain of partial updates; one sets doc to NULL (a value, not "unchanged")
        ("2", "a", "D2", 10, 1, "upsert", [], None),
        ("2", "b", None, 11, 0, "upsert", ["doc"], None),
        ("2", "c", None, 12, 0, "upsert", [], None),
        ("2", "d", None, 13, 0, "upsert", ["doc"], None),
        # 3: no earlier event in the batch: stays unchanged (the MERGE keeps silver's)
        ("3", "a", None, 10, 2, "upsert", ["doc"], None),
        # 4: delete, insert again, partial update: the value of the new life
        ("4", None, None, 10, 3, "delete", [], None),
        ("4", "x", "D4", 11, 1, "upsert", [], None),
        ("4", "y", None, 12, 1, "upsert", ["doc", "name"], None),
    ], EVENTS)
    expected = spark.createDataFrame([
        ("1", "b", "D1", 20, 0, "upsert", [], None),
        ("1", "a", "D1", 10, 0, "upsert", [], None),
        ("2", "a", "D2", 10, 1, "upsert", [], None),
        ("2", "b", "D2", 11, 0, "upsert", [], None),
        ("2", "c", None, 12, 0, "upsert", [], None),
        ("2", "d", None, 13, 0, "upsert", [], None),
        ("3", "a", None, 10, 2, "upsert", ["doc"], None),
        ("4", None, None, 10, 3, "delete", [], None),
        ("4", "x", "D4", 11, 1, "upsert", [], None),
        ("4", "x", "D4", 12, 1, "upsert", [], None),
    ], EVENTS)
    actual = events.transform(lambda df: fill_unchanged_toast(df, ["id"], COLUMNS))
    assert_frames(actual, expected, ["id", "_lsn"])


def test_a_moved_row_takes_unchanged_values_from_its_old_key(spark):
    events = spark.createDataFrame([
        # 1 -> 11 with doc unchanged; the delete of 1 sorts after the move at its position
        ("1", "a", "D1", 10, 0, "upsert", [], None),
        ("11", "b", None, 20, 0, "upsert", ["doc"], ("1",)),
        ("1", None, None, 20, 0, "delete", [], None),
        ("11", "c", None, 21, 0, "upsert", ["doc"], None),
        # 2 -> 12 with nothing earlier in the batch: a later partial update of 12 must
        # not take 12's value from before its earlier delete, but the old key's (silver)
        ("12", "old", "X", 5, 0, "upsert", [], None),
        ("12", None, None, 6, 0, "delete", [], None),
        ("12", "b", None, 20, 1, "upsert", ["doc"], ("2",)),
        ("2", None, None, 20, 1, "delete", [], None),
        ("12", "c", None, 22, 0, "upsert", ["doc"], None),
    ], EVENTS)
    expected = spark.createDataFrame([
        ("1", "a", "D1", 10, 0, "upsert", [], None),
        ("11", "b", "D1", 20, 0, "upsert", [], ("1",)),
        ("1", None, None, 20, 0, "delete", [], None),
        ("11", "c", "D1", 21, 0, "upsert", [], None),
        ("12", "old", "X", 5, 0, "upsert", [], None),
        ("12", None, None, 6, 0, "delete", [], None),
        ("12", "b", None, 20, 1, "upsert", ["doc"], ("2",)),
        ("2", None, None, 20, 1, "delete", [], None),
        ("12", "c", None, 22, 0, "upsert", ["doc"], ("2",)),
    ], EVENTS)
    actual = events.transform(lambda df: fill_unchanged_toast(df, ["id"], COLUMNS))
    assert_frames(actual, expected, ["id", "_lsn"])


def test_without_moved_rows_the_single_pass_fills_the_same(spark):
    events = spark.createDataFrame([
        ("1", "a", "D1", 10, 0, "upsert", [], None),
        ("1", "b", None, 11, 0, "upsert", ["doc"], None),
        ("2", None, None, 10, 1, "delete", [], None),
        ("2", "c", None, 12, 0, "upsert", ["doc"], None),
    ], EVENTS)
    expected = spark.createDataFrame([
        ("1", "a", "D1", 10, 0, "upsert", [], None),
        ("1", "b", "D1", 11, 0, "upsert", [], None),
        ("2", None, None, 10, 1, "delete", [], None),
        ("2", "c", None, 12, 0, "upsert", [], None),  # deleted before: NULL, not unchanged
    ], EVENTS)
    for moved_rows in (True, False):
        actual = events.transform(
            lambda df: fill_unchanged_toast(df, ["id"], COLUMNS, moved_rows=moved_rows))
        assert_frames(actual, expected, ["id", "_lsn"])


def test_each_column_s_fill_is_one_window_function_per_pass(spark, engine):
    """The value found for a column is used four times; computed once per pass, it is one
    window function carrying the value through the shuffle, not one per use."""
    if engine != "spark":
        pytest.skip("reads classic Spark's optimized plan")
    events = spark.createDataFrame([("1", "a", "D1", 10, 0, "upsert", [], None)], EVENTS)
    for moved_rows, passes in ((True, 2), (False, 1)):
        filled = fill_unchanged_toast(events, ["id"], COLUMNS, moved_rows=moved_rows)
        plan = filled._jdf.queryExecution().optimizedPlan().toString()  # noqa: SLF001
        assert plan.count("windowspecdefinition(") == passes * len(COLUMNS)
