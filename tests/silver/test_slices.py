"""A backlog larger than silver.max_batch_rows is applied in slices, with the same result."""

from __future__ import annotations

import logging

import pytest
from deltalake import DeltaTable

from pipelines.silver.job import run_silver
from pipelines.silver.slicing import LAST_INDEX, bucket_width, first_slice_end, slice_end
from pipelines.spark_jobs import is_classic
from tests.support.bronze_builder import BronzeLake, Table
from tests.support.config import make_config

pytestmark = pytest.mark.spark

ITEMS = Table()
MEMBERS = Table("public.members", ("project", "member", "role"), ("int4", "int4", "text"),
                ("project", "member"))
SNAP = {"xmin": 90, "xmax": 95, "xip": []}


def test_slice_end_is_none_when_everything_fits():
    assert slice_end(100, 10, {0: 3, 2: 4}, [((125, 0), 3)], limit=10) is None


def test_a_slice_ends_after_the_last_bucket_that_fits():
    # buckets of 10 LSNs from 100: 100-109 has 3 rows, 110-119 has 4, 120-129 has 5
    assert slice_end(100, 10, {0: 3, 1: 4, 2: 5}, [], limit=8) == ((119, LAST_INDEX), False)
    assert slice_end(100, 10, {0: 3, 1: 4, 2: 5}, [], limit=6) == ((109, LAST_INDEX), False)


def test_a_chunk_counts_in_the_bucket_of_its_high_watermark():
    assert slice_end(100, 10, {0: 3, 2: 1}, [((112, 4), 5)], limit=7) == ((109, LAST_INDEX),
                                                                           False)
    assert slice_end(100, 10, {0: 3, 2: 1}, [((112, 4), 5)], limit=8) == ((119, LAST_INDEX),
                                                                           False)


def test_a_first_bucket_larger_than_the_limit_is_a_crowded_slice_of_its_own():
    assert slice_end(100, 10, {0: 50, 1: 1}, [], limit=8) == ((109, LAST_INDEX), True)
    assert slice_end(100, 10, {3: 50, 7: 1}, [], limit=8) == ((139, LAST_INDEX), True)


def test_a_dense_burst_is_cut_by_counting_its_bucket_again(spark):
    """Rows at LSNs 1..10,000,000 but 40 of them in a burst at 5,000,000-5,000,039: the
    first count puts the burst in one bucket of ~9,766 LSNs; finer counts cut it."""
    from tests.support.bronze_builder import spark_frame

    rows = [ITEMS.insert(lsn, 0, id=lsn, name="x") for lsn in (1, 10_000_000)]
    rows += [ITEMS.insert(5_000_000 + i, 0, id=i + 2, name="x") for i in range(40)]
    frame = spark_frame(spark, rows)
    # 1,024 buckets of 9,766 LSNs: the first holds one row, the burst's is over the limit
    assert first_slice_end(frame, 1, 10_000_000, [], limit=10) == (9_766, LAST_INDEX)
    # from the burst on: its bucket alone is over, so it is counted in buckets of 5 LSNs
    rest = frame.filter("commit_lsn > 1")
    assert first_slice_end(rest, 5_000_000, 10_000_000, [], limit=10) == (5_000_009, LAST_INDEX)
    single = [ITEMS.insert(7, i, id=i, name="x") for i in range(30)]  # one transaction
    assert first_slice_end(spark_frame(spark, single), 7, 7, [], limit=10) == (7, LAST_INDEX)


def test_bucket_width_spreads_the_lsns_over_at_most_1024_buckets():
    assert bucket_width(100, 100) == 1
    assert bucket_width(0, 1023) == 1 and bucket_width(0, 1024) == 2
    width = bucket_width(5, 10**9)
    assert (10**9 - 5) // width < 1024


def backlog(lake):
    """Changes over many commits, a backfill chunk of 4 rows, and a truncate late on."""
    changes = []
    for n in range(1, 13):
        changes.append(ITEMS.insert(10 + n, 0, id=n, name=f"n{n}", doc=f"D{n}"))
    changes += [
        ITEMS.watermark(30, 0, "b1", 1, "low"),
        ITEMS.update(31, 0, id=101, name="new", unchanged=["doc"], xid=93),  # in the window
        ITEMS.watermark(32, 0, "b1", 1, "high", SNAP, rows=4),
        ITEMS.update(40, 0, id=1, name="n1b", unchanged=["doc"]),
        ITEMS.delete(41, 0, id=2),
        ITEMS.update(42, 0, id=30, name="moved", unchanged=["doc"], old_key={"id": 3}),
        MEMBERS.insert(43, 0, project=1, member=1, role="owner"),
        MEMBERS.truncate(50, 0),
        MEMBERS.insert(51, 0, project=1, member=2, role="dev"),
    ]
    lake.append_changes(changes)
    lake.append_snapshots([ITEMS.chunk_row("b1", 1, i, id=100 + i, name="old", doc=f"P{i}")
                           for i in range(4)])


def silver(spark, root, table):
    df = spark.read.format("delta").load(str(root / "silver" / "public" / table))
    return sorted(tuple(r) for r in df.collect())


def test_a_backlog_is_applied_in_slices_with_the_same_tables_and_report(spark, tmp_path, caplog):
    whole_lake, sliced_lake = BronzeLake(tmp_path / "whole"), BronzeLake(tmp_path / "sliced")
    for lake in (whole_lake, sliced_lake):
        backlog(lake)
    whole = run_silver(make_config(lake=whole_lake.root), spark)
    assert DeltaTable(str(whole_lake.root / "_state/silver_progress")).version() == 0
    with caplog.at_level(logging.INFO, logger="pipelines.silver.job"):
        sliced = run_silver(make_config(lake=sliced_lake.root, silver={"max_batch_rows": 5}),
                            spark)
    for table in ("items", "members"):
        assert silver(spark, sliced_lake.root, table) == silver(spark, whole_lake.root, table)
    assert sliced.upto == whole.upto == (51, 0)
    assert sliced.tables == whole.tables  # counts summed over the slices
    slices = DeltaTable(str(sliced_lake.root / "_state/silver_progress")).version() + 1
    assert slices >= 4  # 12 inserts, a 4-row chunk, 7 more changes at <= 5 rows a slice
    assert sum("applying a slice" in r.getMessage() for r in caplog.records) == slices - 1


def test_a_table_stopped_in_one_slice_is_not_retried_while_the_others_go_on(spark, lake):
    lake.append_changes(
        [MEMBERS.insert(10, 0, project="p1", member=1, role="x")]  # cannot be typed
        + [ITEMS.insert(10 + n, 0, id=n, name=f"n{n}") for n in range(1, 9)])
    report = run_silver(make_config(lake=lake.root, silver={"max_batch_rows": 3}), spark)
    assert [t.table for t in report.failed] == ["public.members"]
    assert "cannot be typed as int" in report.failed[0].error
    assert [r[0] for r in silver(spark, lake.root, "items")] == list(range(1, 9))
    assert not (lake.root / "silver/public/members").exists()
    # slice 1: the bad row and 2 items; then 3 + 3 items: the stopped table counts no more
    assert DeltaTable(str(lake.root / "_state/silver_progress")).version() + 1 == 3


# a row per slice on Sail; classic Spark's agreement needs one replay, not 20 slices
@pytest.mark.parametrize("limit", [pytest.param(1, marks=pytest.mark.sail_only), 3])
def test_a_replay_in_slices_changes_nothing(spark, lake, limit):
    backlog(lake)
    run_silver(make_config(lake=lake.root), spark)
    expected = silver(spark, lake.root, "items")
    DeltaTable(str(lake.root / "_state" / "silver_progress")).delete()  # forget progress
    run_silver(make_config(lake=lake.root, silver={"max_batch_rows": limit}), spark)
    assert silver(spark, lake.root, "items") == expected


def test_a_first_load_appends_the_slices_of_keys_silver_cannot_hold(spark, lake):
    """Each later slice of a first load holds keys above silver's (its files' statistics
    say so): it is appended, which is what its MERGE would insert; a slice with a key
    silver may hold is merged."""
    lake.append_changes([ITEMS.insert(10 + n, 0, id=n, name=f"n{n}", doc="d")
                         for n in range(1, 9)]
                        + [ITEMS.update(19, 0, id=2, name="two", unchanged=["doc"]),
                           ITEMS.insert(19, 1, id=9, name="n9", doc="d")])
    run_silver(make_config(lake=lake.root, silver={"max_batch_rows": 4}), spark)
    rows = spark.read.format("delta").load(str(lake.root / "silver" / "public" / "items"))
    assert sorted(tuple(r) for r in rows.select("id", "name", "doc").collect()) == [
        (n, "two" if n == 2 else f"n{n}", "d") for n in range(1, 10)]
    commits = DeltaTable(str(lake.root / "silver" / "public" / "items")).history()
    operations = [c["operation"] for c in reversed(commits)]
    assert operations[1:] == ["WRITE", "MERGE"], operations


def chained_backfill(lake, backfill: str, first_lsn: int, first_id: int, chunks: int) -> None:
    """A backfill of `chunks` chunks of 2 rows each, each starting at the cursor the one
    before it ended at (their keys proven disjoint), from key `first_id` on."""
    changes, rows, cursor = [], [], None
    for n in range(chunks):
        low, high = first_id + 2 * n, first_id + 2 * n + 1
        lsn = first_lsn + 2 * n
        keys = {"after": cursor, "last": [str(high)]}
        changes += [ITEMS.watermark(lsn, 0, backfill, n + 1, "low"),
                    ITEMS.watermark(lsn + 1, 0, backfill, n + 1, "high", SNAP, rows=2,
                                    keys=keys)]
        rows += [ITEMS.chunk_row(backfill, n + 1, i, id=key, name="old", doc=f"P{key}")
                 for i, key in enumerate((low, high))]
        cursor = [str(high)]
    lake.append_changes(changes)
    lake.append_snapshots(rows)


def test_a_first_load_of_chunks_proven_one_per_key_is_one_batch(spark, lake):
    """A new table's chunk rows proven one per key stream into its first write (on Sail,
    which skips their ordering), so they do not count toward max_batch_rows; a classic
    driver orders them and slices. Once the table exists, a backfill's chunks count."""
    chained_backfill(lake, "b1", 20, 1, chunks=4)  # 8 chunk rows
    config = make_config(lake=lake.root, silver={"max_batch_rows": 3})
    run_silver(config, spark)
    progress = DeltaTable(str(lake.root / "_state/silver_progress"))
    slices = progress.version() + 1  # each slice records its progress
    assert slices > 1 if is_classic(spark) else slices == 1
    assert [r[0] for r in silver(spark, lake.root, "items")] == list(range(1, 9))

    before = progress.version()
    chained_backfill(lake, "b2", 40, 1, chunks=4)
    run_silver(config, spark)
    assert DeltaTable(str(lake.root / "_state/silver_progress")).version() - before > 1
    assert [r[0] for r in silver(spark, lake.root, "items")] == list(range(1, 9))
