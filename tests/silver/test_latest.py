import pytest
from chispa import assert_df_equality

from pipelines.silver.latest import latest_change_per_key

pytestmark = pytest.mark.spark

SCHEMA = "id long, v string, _lsn long, _change_index long"


def test_highest_position_wins_regardless_of_arrival_order(spark):
    events = spark.createDataFrame([
        (1, "second", 200, 0),
        (1, "first", 100, 3),
        (1, "third", 200, 1),   # same transaction, later change
        (2, "only", 150, 0),
        (2, "only", 150, 0),    # replayed duplicate
    ], SCHEMA)
    expected = spark.createDataFrame([(1, "third", 200, 1), (2, "only", 150, 0)], SCHEMA)
    actual = events.transform(lambda df: latest_change_per_key(df, ["id"]))
    assert_df_equality(actual, expected, ignore_row_order=True)


def test_composite_keys(spark):
    schema = "a int, b int, v string, _lsn long, _change_index long"
    events = spark.createDataFrame([(1, 1, "x", 10, 0), (1, 2, "y", 5, 0), (1, 1, "z", 11, 0)],
                                   schema)
    expected = spark.createDataFrame([(1, 1, "z", 11, 0), (1, 2, "y", 5, 0)], schema)
    assert_df_equality(latest_change_per_key(events, ["a", "b"]), expected, ignore_row_order=True)


def test_no_keys_is_a_clear_error(spark):
    with pytest.raises(ValueError, match="at least one key"):
        latest_change_per_key(spark.createDataFrame([(1, 1, 1)], "v int, _lsn long, "
                                                    "_change_index long"), [])
