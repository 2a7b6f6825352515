"""Where a batch is staged: a small one is held by the driver, a larger one is written as
Parquet under the lake's _state (catalog.staged, TableScan.small); the tables are the
same either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.silver import scan
from pipelines.silver.chunk_windows import ChunkWindow
from pipelines.silver.job import run_silver
from pipelines.silver.scan import SMALL_BATCH_ROWS, TableScan
from tests.support.bronze_builder import BronzeLake
from tests.support.config import make_config
from tests.support.silver_changes import EXPECTED_ITEMS, ITEMS, SNAP, items

pytestmark = pytest.mark.spark


def window(rows: int | None) -> ChunkWindow:
    return ChunkWindow("b1", 1, "public.items", (10, 0), (20, 0), None, None, rows)


def test_a_batch_is_small_up_to_its_limit_of_bronze_rows_counting_chunk_rows():
    assert TableScan("public.items", updates=SMALL_BATCH_ROWS).small
    assert not TableScan("public.items", updates=SMALL_BATCH_ROWS + 1).small
    assert TableScan("public.items", inserts=1, windows=[window(SMALL_BATCH_ROWS - 1)]).small
    assert not TableScan("public.items", inserts=2, windows=[window(SMALL_BATCH_ROWS - 1)]).small
    assert not TableScan("public.items", windows=[window(None)]).small  # its rows unknown


def staged_parts(root: Path) -> set[str]:
    """The tables whose staged Parquet files are under the lake's _state."""
    state = root / "_state"
    return {p.parent.relative_to(state).as_posix()
            for p in state.glob("silver_staging*/**/*.parquet")}


def history(spark, root: Path) -> list[tuple]:
    table = spark.read.format("delta").load(str(root / "silver_history" / "public" / "items"))
    return [tuple(r) for r in table.orderBy("id", "_valid_from").collect()]


def every_kind_of_items_change(lake: BronzeLake) -> None:
    """silver_changes.every_kind_of_change's changes of public.items, its chunk's high
    watermark counting its rows."""
    lake.append_changes([
        ITEMS.insert(10, 0, id=1, name="a", doc="D1"),
        ITEMS.insert(10, 1, id=2, name="b", doc="D2"),
        ITEMS.insert(10, 2, id=3, name="c", doc="D3"),
        ITEMS.update(11, 0, id=1, name="a2", unchanged=["doc"]),
        ITEMS.delete(12, 0, id=2),
        ITEMS.insert(13, 0, id=2, name="b2", doc="D2b"),
        ITEMS.update(14, 0, id=30, name="c", unchanged=["doc"], old_key={"id": 3}),
        ITEMS.update(15, 0, id=1, name="a2", doc=None),
        ITEMS.watermark(18, 0, "b1", 1, "low"),
        ITEMS.update(19, 0, id=101, name="new", unchanged=["doc"], xid=93),
        ITEMS.watermark(20, 0, "b1", 1, "high", SNAP, rows=2)])
    lake.append_snapshots([ITEMS.chunk_row("b1", 1, 0, id=100, name="old", doc="P100"),
                           ITEMS.chunk_row("b1", 1, 1, id=101, name="stale", doc="P101")])


def test_a_batch_is_staged_by_its_size_and_gives_the_same_tables(spark, tmp_path, monkeypatch):
    """Two batches (the second continues versions: history stages their base too)."""
    tables = {}
    for limit in (SMALL_BATCH_ROWS, 0):
        monkeypatch.setattr(scan, "SMALL_BATCH_ROWS", limit)
        lake = BronzeLake(tmp_path / str(limit))
        config = make_config(lake=lake.root, silver={"history": "*"})
        every_kind_of_items_change(lake)
        assert not run_silver(config, spark).failed
        assert items(spark, config) == EXPECTED_ITEMS
        lake.append_changes([ITEMS.update(30, 0, id=1, name="a3", doc="D1c")])
        assert not run_silver(config, spark).failed
        assert items(spark, config)[0] == (1, "a3", "D1c")
        tables[limit] = items(spark, config, with_meta=True), history(spark, lake.root)
        assert staged_parts(lake.root) == (set() if limit else {
            "silver_staging/public/items", "silver_staging_history/public/items/events",
            "silver_staging_history/public/items/base",
            "silver_staging_history/public/items/versions"})
    assert tables[SMALL_BATCH_ROWS] == tables[0]
