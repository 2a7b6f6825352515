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
from tests.support.silver_changes import EXPECTED_ITEMS, ITEMS, every_kind_of_change, items

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


def test_a_batch_is_staged_by_its_size_and_gives_the_same_tables(spark, engine, tmp_path,
                                                                monkeypatch):
    """Two batches. members keeps no history: its newest events are staged. items keeps
    history: every event is staged and the versions, and the newest events again only on
    a classic driver (through Spark Connect they join nothing: stage.py); the second
    batch continues versions and leaves a value unchanged, so the versions open before it
    (their base, which the TOAST fill reads too) are staged."""
    tables = {}
    for limit in (SMALL_BATCH_ROWS, 0):
        monkeypatch.setattr(scan, "SMALL_BATCH_ROWS", limit)
        lake = BronzeLake(tmp_path / str(limit))
        config = make_config(lake=lake.root, silver={"history": ["public.items"]})
        every_kind_of_change(lake, chunk_rows=2)  # every chunk's rows known
        assert not run_silver(config, spark).failed
        assert items(spark, config) == EXPECTED_ITEMS
        lake.append_changes([ITEMS.update(30, 0, id=2, name="b3", unchanged=["doc"])])
        assert not run_silver(config, spark).failed
        assert items(spark, config)[1] == (2, "b3", "D2b")
        tables[limit] = items(spark, config, with_meta=True), history(spark, lake.root)
        assert staged_parts(lake.root) == (set() if limit else {
            "silver_staging/public/members",
            *(["silver_staging/public/items"] if engine == "spark" else []),
            *(f"silver_staging_history/public/items/{part}"
              for part in ("events", "base", "versions"))})
    assert tables[SMALL_BATCH_ROWS] == tables[0]
