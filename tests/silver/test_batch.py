import pytest

from pipelines.silver.batch import latest_events
from pipelines.silver.events import changes_to_events
from pipelines.silver.key_change import expand_key_changes
from tests.support.bronze_builder import Table, assert_frames, spark_frame

pytestmark = pytest.mark.spark

T = Table()
SHAPE = T.shape
OUT = ("id string, name string, doc string, _lsn long, _change_index long, _cdc_op string, "
       "_cdc_unchanged array<string>")


def test_one_batch_keeps_the_newest_event_per_key_above_the_truncate_floor(spark):
    bronze = spark_frame(spark, [
        # 1: out of order and duplicated; insert, partial update (TOAST), NULL update
        T.update(31, 0, id=1, name="c", doc=None),  # doc set to NULL: a value
        T.insert(20, 0, id=1, name="a", doc="D1"),
        T.update(30, 0, id=1, name="b", unchanged=["doc"]),
        T.update(30, 0, id=1, name="b", unchanged=["doc"]),
        T.update(32, 0, id=1, name="d", unchanged=["doc"]),  # keeps the NULL, not D1
        # 2: insert, update, delete, insert again; the last partial update keeps D2b
        T.insert(20, 1, id=2, name="a", doc="D2"), T.update(21, 0, id=2, name="b", doc="x"),
        T.delete(22, 0, id=2), T.insert(23, 0, id=2, name="again", doc="D2b"),
        T.update(24, 0, id=2, name="again2", unchanged=["doc"]),
        # 3 -> 4: the key changes; the old key is deleted, doc follows the row
        T.insert(20, 2, id=3, name="a", doc="D3"),
        T.update(25, 0, id=4, name="moved", unchanged=["doc"], old_key={"id": 3}),
        # 5: before the truncate (floor 15) only; 6 inserted after it
        T.insert(10, 0, id=5, name="gone", doc="x"), T.insert(16, 0, id=6, name="new", doc="y"),
        # 7: a partial update with nothing earlier in the batch
        T.update(40, 0, id=7, name="p", unchanged=["doc"]),
    ])
    events = (changes_to_events(bronze, SHAPE)
              .transform(lambda df: expand_key_changes(df, SHAPE.key_columns))
              .transform(lambda df: latest_events(df, SHAPE, floor=(15, 0))))
    expected = spark.createDataFrame([
        ("1", "d", None, 32, 0, "upsert", []),
        ("2", "again2", "D2b", 24, 0, "upsert", []),
        ("3", None, None, 25, 0, "delete", []),
        ("4", "moved", "D3", 25, 0, "upsert", []),
        ("6", "new", "y", 16, 0, "upsert", []),
        ("7", "p", None, 40, 0, "upsert", ["doc"]),  # still unchanged: the MERGE keeps it
    ], OUT)
    actual = events.select("id", "name", "doc", "_lsn", "_change_index", "_cdc_op",
                           "_cdc_unchanged")
    assert_frames(actual, expected, ["id"])
