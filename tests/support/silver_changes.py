"""Two source tables' bronze with every kind of change, and what silver holds after it:
the silver job tests' common case, at lake paths or as catalog tables."""

from __future__ import annotations

from pipelines.catalog import TableNames, read_table
from pipelines.config import Config
from tests.support.bronze_builder import BronzeLake, Table

ITEMS = Table()
MEMBERS = Table("public.members", ("project", "member", "role"), ("int4", "int4", "text"),
                ("project", "member"))
SNAP = {"xmin": 90, "xmax": 95, "xip": []}
EXPECTED_ITEMS = [(1, "a2", None), (2, "b2", "D2b"), (30, "c", "D3"), (100, "old", "P100"),
                  (101, "new", "P101")]


def every_kind_of_change(lake: BronzeLake, chunk_rows: int | None = None) -> None:
    """Two tables, every kind of change, and a backfill chunk of rows older than the slot
    (its high watermark counts `chunk_rows`, 2, if given)."""
    lake.append_changes([
        ITEMS.insert(10, 0, id=1, name="a", doc="D1"),
        ITEMS.insert(10, 1, id=2, name="b", doc="D2"),
        ITEMS.insert(10, 2, id=3, name="c", doc="D3"),
        MEMBERS.insert(10, 3, project=1, member=1, role="owner"),
        MEMBERS.insert(10, 4, project=1, member=2, role="dev"),
        ITEMS.update(11, 0, id=1, name="a2", unchanged=["doc"]),  # TOAST left alone
        ITEMS.delete(12, 0, id=2),
        ITEMS.insert(13, 0, id=2, name="b2", doc="D2b"),  # inserted again
        ITEMS.update(14, 0, id=30, name="c", unchanged=["doc"], old_key={"id": 3}),  # key change
        ITEMS.update(15, 0, id=1, name="a2", doc=None),  # doc set to NULL
        MEMBERS.truncate(16, 0),
        MEMBERS.insert(17, 0, project=1, member=3, role="viewer"),
        ITEMS.watermark(18, 0, "b1", 1, "low"),
        ITEMS.update(19, 0, id=101, name="new", unchanged=["doc"], xid=93),  # in the window
        ITEMS.watermark(20, 0, "b1", 1, "high", SNAP, rows=chunk_rows),
        ITEMS.watermark(21, 0, "b1", 2, "low"),  # no high yet: chunk 2 is not applied
    ])
    lake.append_snapshots([
        ITEMS.chunk_row("b1", 1, 0, id=100, name="old", doc="P100"),
        ITEMS.chunk_row("b1", 1, 1, id=101, name="stale", doc="P101"),
        ITEMS.chunk_row("b1", 2, 0, id=102, name="later", doc="P102"),
    ])


def items(spark, config: Config, with_meta: bool = False) -> list[tuple]:
    """Silver's public.items (where the config puts it) by id: id, name and doc, or every
    column."""
    df = read_table(spark, TableNames.from_config(config).silver("public", "items"))
    columns = df.columns if with_meta else ["id", "name", "doc"]
    return [tuple(r) for r in df.select(*columns).orderBy("id").collect()]
