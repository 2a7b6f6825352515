"""scan_bronze: the per-table summary silver plans each table's batch from."""

from __future__ import annotations

import pytest

from pipelines.silver.scan import scan_bronze
from tests.support.bronze_builder import Table, spark_frame

pytestmark = pytest.mark.spark

ITEMS = Table()
MEMBERS = Table("public.members", ("project", "member", "role"), ("int4", "int4", "text"),
                ("project", "member"))


def scan(spark, rows, after=(0, 0)):
    return scan_bronze(spark_frame(spark, rows), {}, after, None, lambda: [])


def test_summary_counts_positions_key_moves_and_unchanged_columns(spark):
    result = scan(spark, [
        ITEMS.insert(10, 0, id=1, name="a", doc="D1"),
        ITEMS.update(11, 0, id=1, name="a2", unchanged=["doc"]),
        ITEMS.update(12, 0, id=5, name="a3", doc="x", old_key={"id": 1}),
        ITEMS.delete(13, 0, id=5),
        MEMBERS.insert(14, 0, project=1, member=1, role="owner"),
        MEMBERS.update(15, 0, project=1, member=1, role="dev"),
    ])
    assert result.upto == (15, 0)
    items, members = result.tables["public.items"], result.tables["public.members"]
    assert (items.inserts, items.updates, items.deletes, items.moved) == (1, 2, 1, True)
    assert items.unchanged == {"doc"}
    assert (members.inserts, members.updates, members.moved) == (1, 1, False)
    assert members.unchanged == frozenset()  # its batch skips the TOAST fill


def test_only_new_rows_count(spark):
    result = scan(spark, [ITEMS.update(11, 0, id=1, name="a2", unchanged=["doc"]),
                         ITEMS.update(12, 0, id=1, name="a3")], after=(11, 0))
    assert result.tables["public.items"].unchanged == frozenset()
    assert result.tables["public.items"].updates == 1
