import pytest

from pipelines.silver.key_change import expand_key_changes
from tests.support.bronze_builder import assert_frames

pytestmark = pytest.mark.spark

EVENTS = ("id string, doc string, _lsn long, _change_index long, _commit_ts timestamp, "
          "_cdc_op string, _cdc_unchanged array<string>, _cdc_old_key struct<id:string>, "
          "_cdc_xid long")


def test_key_change_becomes_delete_of_old_key_plus_upsert(spark):
    events = spark.createDataFrame([
        ("1", "a", 10, 0, None, "upsert", [], None, 7),
        ("3", None, 11, 2, None, "upsert", ["doc"], ("2",), 8),  # 2 -> 3, doc unchanged
        ("4", None, 12, 0, None, "delete", [], None, 9),
    ], EVENTS)
    expected = spark.createDataFrame([
        ("1", "a", 10, 0, None, "upsert", [], None, 7),
        ("3", None, 11, 2, None, "upsert", ["doc"], ("2",), 8),
        ("2", None, 11, 2, None, "delete", [], None, 8),
        ("4", None, 12, 0, None, "delete", [], None, 9),
    ], EVENTS)
    assert_frames(expand_key_changes(events, ["id"]), expected, ["_lsn", "_cdc_op"])
