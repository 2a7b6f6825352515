import pytest
from chispa import assert_df_equality

from pipelines.errors import DataError
from pipelines.silver.events import (
    changes_to_events, shape_from_row, snapshot_rows, with_chunk_columns)
from tests.support.bronze_builder import Table, assert_frames, spark_frame

pytestmark = pytest.mark.spark

ITEMS = Table()
SHAPE = ITEMS.shape
OUT = ("id string, name string, doc string, _lsn long, _change_index long, _cdc_op string, "
       "_cdc_unchanged array<string>, _cdc_old_key struct<id:string>")


def events(df):
    return df.select("id", "name", "doc", "_lsn", "_change_index", "_cdc_op",
                     "_cdc_unchanged", "_cdc_old_key")


def test_rows_become_text_events(spark):
    full_old_row = ITEMS.update(15, 0, id=4, name="b", doc="x")
    full_old_row.update(old_kind="O", old_values=["4", "a", "x"])  # same key: no key change
    before_add_column = Table(columns=("id", "name"), types=("int4", "text"))
    bronze = spark_frame(spark, [
        ITEMS.insert(10, 0, id=1, name="a", doc="big"),
        ITEMS.update(11, 0, id=1, name=None, unchanged=["doc"]),  # name set NULL, doc kept
        ITEMS.delete(12, 0, id=1),
        ITEMS.update(13, 0, id=3, name="moved", doc="d", old_key={"id": 2}),
        ITEMS.truncate(14, 0),
        full_old_row,
        before_add_column.insert(16, 0, id=5, name="old shape"),
    ])
    expected = spark.createDataFrame([
        ("1", "a", "big", 10, 0, "upsert", [], None),
        ("1", None, None, 11, 0, "upsert", ["doc"], None),
        ("1", None, None, 12, 0, "delete", [], None),
        ("3", "moved", "d", 13, 0, "upsert", [], ("2",)),
        ("4", "b", "x", 15, 0, "upsert", [], None),
        ("5", "old shape", None, 16, 0, "upsert", [], None),
    ], OUT)
    assert_frames(events(changes_to_events(bronze, SHAPE)), expected, ["_lsn"])


def test_snapshot_rows_by_column_name(spark):
    from pipelines.bronze.schema import SNAPSHOTS_SCHEMA

    reordered = Table(columns=("doc", "id", "name"), types=("text", "int4", "text"))
    bronze = spark_frame(spark, [reordered.chunk_row("b1", 1, 0, id=5, name="n", doc="d")],
                         SNAPSHOTS_SCHEMA)
    expected = spark.createDataFrame(
        [("b1", 1, "5", "n", "d")],
        "_cdc_backfill_id string, _cdc_chunk_id long, id string, name string, doc string")
    assert_df_equality(snapshot_rows(bronze, SHAPE), expected, ignore_nullable=True)


@pytest.mark.parametrize("every_row", [False, True], ids=["first-row", "every-row"])
def test_chunk_rows_get_their_chunks_columns(spark, every_row):
    """The backfill writes a chunk's shape on its row 0 only (older backfills on every
    row): each row is read by its own chunk's column names, also when chunks differ."""
    from pipelines.bronze.schema import SNAPSHOTS_SCHEMA

    reordered = Table(columns=("doc", "id", "name"), types=("text", "int4", "text"))
    rows = [ITEMS.chunk_row("b1", 1, i, every_row, id=i, name="a", doc="x") for i in range(3)]
    rows += [reordered.chunk_row("b1", 2, i, every_row, id=10 + i, name="b", doc="y")
             for i in range(2)]
    bronze = spark_frame(spark, rows[::-1], SNAPSHOTS_SCHEMA)  # row 0 need not come first
    filled = with_chunk_columns(bronze)
    assert sorted(tuple(r) for r in filled.select("chunk_id", "row_index", "columns").collect()) \
        == [(1, i, ["id", "name", "doc"]) for i in range(3)] + \
        [(2, i, ["doc", "id", "name"]) for i in range(2)]
    expected = spark.createDataFrame(
        [("b1", 1, str(i), "a", "x") for i in range(3)]
        + [("b1", 2, str(10 + i), "b", "y") for i in range(2)],
        "_cdc_backfill_id string, _cdc_chunk_id long, id string, name string, doc string")
    assert_df_equality(snapshot_rows(filled, SHAPE), expected, ignore_nullable=True,
                       ignore_row_order=True)


def test_chunks_with_the_same_columns_get_them_without_a_join(spark):
    """Given the one column list of every chunk, rows get it as a literal: no chunk's
    first row is read (these chunks' first rows are not even here)."""
    from pipelines.bronze.schema import SNAPSHOTS_SCHEMA

    rows = [ITEMS.chunk_row("b1", chunk, i, id=10 * chunk + i, name="a", doc="x")
            for chunk in (1, 2) for i in (1, 2)]
    bronze = spark_frame(spark, rows, SNAPSHOTS_SCHEMA)
    assert with_chunk_columns(bronze).count() == 0  # the join needs the first rows
    filled = with_chunk_columns(bronze, ("id", "name", "doc"))
    assert sorted(r.id for r in snapshot_rows(filled, SHAPE).collect()) == ["11", "12", "21",
                                                                            "22"]


def test_shape_from_row_and_refusals():
    row = ITEMS.insert(1, 0, id=1)
    assert shape_from_row("public", "items", row) == SHAPE
    with pytest.raises(DataError, match="no key columns"):
        shape_from_row("public", "items", {**row, "key_columns": []})
    with pytest.raises(DataError, match="clash"):
        shape_from_row("public", "items", {**row, "columns": ["id", "_lsn", "doc"]})
