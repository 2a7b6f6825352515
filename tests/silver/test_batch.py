import pytest

from pyspark.sql import functions as F

from pipelines.silver.batch import latest_events, lone_chunk_rows
from pipelines.silver.events import CHANGE, SNAPSHOT, changes_to_events
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


def test_lone_chunk_rows_skip_the_ordering_and_give_the_same_newest_events(spark):
    """Chunk rows one per key (the rows at LSN 50 here): those whose key no change has
    pass as they are; the others are ordered with the changes."""
    bronze = spark_frame(spark, [
        T.insert(50, 0, id=1, name="chunk", doc="C1"),  # changed after the chunk
        T.update(60, 0, id=1, name="later", unchanged=["doc"]),
        T.insert(50, 1, id=2, name="chunk", doc="C2"),  # alone
        T.insert(50, 2, id=3, name="chunk", doc="C3"),  # newer than its key's change
        T.update(40, 0, id=3, name="older", doc="x"),
        T.insert(50, 3, id=4, name="chunk", doc="C4"),  # a moved row's old key
        T.update(70, 0, id=5, name="moved", unchanged=["doc"], old_key={"id": 4}),
    ])
    events = (changes_to_events(bronze, SHAPE)
              .transform(lambda df: expand_key_changes(df, SHAPE.key_columns))
              .withColumn(CHANGE, F.when(F.col("_lsn") == 50, F.lit(SNAPSHOT))
                          .otherwise(F.col(CHANGE))))
    changes = events.filter(F.col(CHANGE) != SNAPSHOT)
    alone, others = lone_chunk_rows(events, SHAPE.key_columns, changes)
    assert [r.id for r in alone.collect()] == ["2"] and others.count() == 7
    expected = spark.createDataFrame([
        ("1", "later", "C1", 60, 0, "upsert", []),
        ("2", "chunk", "C2", 50, 1, "upsert", []),
        ("3", "chunk", "C3", 50, 2, "upsert", []),
        ("4", None, None, 70, 0, "delete", []),
        ("5", "moved", "C4", 70, 0, "upsert", []),
    ], OUT)
    columns = ["id", "name", "doc", "_lsn", "_change_index", "_cdc_op", "_cdc_unchanged"]
    assert_frames(latest_events(events, SHAPE, one_chunk_row_per_key=True, changes=changes)
                  .select(*columns), expected, ["id"])
    assert_frames(latest_events(events, SHAPE).select(*columns), expected, ["id"])
