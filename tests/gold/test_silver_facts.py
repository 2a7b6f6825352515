"""What gold asks of a silver table, answered by delta-rs for a lake path and by Spark
for a catalog name, the same on both: its live rows and its newest position, with
deletion vectors hiding the row whose statistics set the table's largest `_lsn`."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.catalog import TableRef
from pipelines.gold.silver_facts import newest_position, row_count
from pipelines.lake import TableLocation
from pipelines.positions import START
from pipelines.silver.job import run_silver
from tests.support.bronze_builder import BronzeLake
from tests.support.config import make_config
from tests.support.silver_changes import ITEMS

pytestmark = pytest.mark.spark


@pytest.fixture
def tables(spark, tmp_path):
    """public.items: 20 rows at LSN 10, id 3 updated at LSN 11, the table compacted into
    one file (delta-rs, as silver's maintenance does), then id 3 deleted at LSN 12: a
    deletion vector on that file (as on a table above silver.copy_on_write_mb, which a
    classic driver rewrites), and a tombstone. The silver table by path and by its
    session catalog name, and the tombstones."""
    root = tmp_path / "lake"
    lake, config = BronzeLake(root), make_config(lake=root, silver={"copy_on_write_mb": 0})
    silver = TableRef(path=TableLocation(str(root / "silver" / "public" / "items")))

    def applied(changes: list[dict]) -> None:
        lake.append_changes(changes)
        run_silver(config, spark)

    applied([ITEMS.insert(10, i, id=i, name=f"n{i}", doc="d") for i in range(20)])
    applied([ITEMS.update(11, 0, id=3, name="three", doc="d")])
    silver.path.open().optimize.compact()
    applied([ITEMS.delete(12, 0, id=3)])
    marks = TableRef(path=TableLocation(
        str(root / "_state" / "silver_tombstones" / "public" / "items")))
    return silver, TableRef(parts=("silver", "items")), marks


def test_a_path_and_a_name_count_the_live_rows(spark, tables):
    by_path, by_name, marks = tables
    assert row_count(spark, by_path) == row_count(spark, by_name) == 19
    assert row_count(spark, marks) == 1


def test_the_newest_live_row_is_found_below_a_deleted_one(spark, tables):
    """The files' statistics say LSN 11, whose only row a deletion vector removed."""
    by_path, by_name, marks = tables
    stats = pa.table(by_path.path.open().get_add_actions(flatten=True))
    assert pc.max(stats["max._lsn"]).as_py() == 11
    assert newest_position(spark, [by_path]) == newest_position(spark, [by_name]) == (10, 19)
    assert newest_position(spark, [by_path, marks]) == (12, 0)
    assert newest_position(spark, [by_name, None, marks]) == (12, 0)


def test_only_positions_after_the_given_one_count(spark, tables):
    by_path, by_name, marks = tables
    for table in (by_path, by_name):
        assert newest_position(spark, [table], (10, 18)) == (10, 19)
        assert newest_position(spark, [table], (10, 19)) is None
        assert newest_position(spark, [table, marks], (10, 19)) == (12, 0)
        assert newest_position(spark, [table, marks], (12, 0)) is None
    assert newest_position(spark, [], START) is None
