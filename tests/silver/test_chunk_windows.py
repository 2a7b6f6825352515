import json

import pytest

from pipelines.errors import DataError
from pipelines.bronze.watermarks import KeyRange
from pipelines.silver.chunk_windows import (
    ChunkWindow, Snapshot, LandedWatermark, chunk_windows, disjoint_keys, invisible_to_snapshot,
    parse_watermark)

EPOCH1 = 1 << 32
SNAPSHOT = Snapshot(xmin=EPOCH1 + 5, xmax=EPOCH1 + 20, xip=(EPOCH1 + 7, EPOCH1 + 9))
# 32-bit xids around the snapshot: before xmin (also across the wrap), running, after xmax
XIDS = {3: True, 4294967290: True, 5: True, 6: True, 7: False, 9: False, 19: True,
        20: False, 25: False, None: True}


def mark(kind, lsn, chunk=1, snapshot=None, table="public.items"):
    body = {"backfill_id": "b", "chunk_id": chunk, "table": table, "kind": kind}
    if snapshot:
        body["snapshot"] = snapshot
    return parse_watermark(json.dumps(body).encode(), (lsn, 0))


def test_snapshot_visibility_compares_32_bit_xids_modulo_2_32():
    assert {xid: SNAPSHOT.sees(xid) for xid in XIDS} == XIDS


def test_chunks_apply_only_with_both_watermarks():
    snap = {"xmin": EPOCH1 + 5, "xmax": EPOCH1 + 20, "xip": [EPOCH1 + 7]}
    windows = chunk_windows([mark("low", 10, 1), mark("high", 20, 1, snap),
                             mark("low", 30, 2),  # no high yet: never applied
                             mark("high", 45, 3), mark("low", 40, 3)])
    assert windows == [
        ChunkWindow("b", 1, "public.items", (10, 0), (20, 0), None,
                    Snapshot(EPOCH1 + 5, EPOCH1 + 20, (EPOCH1 + 7,))),
        ChunkWindow("b", 3, "public.items", (40, 0), (45, 0), None, None)]


def test_high_without_low_and_malformed_messages_are_data_errors():
    with pytest.raises(DataError, match="no matching earlier low"):
        chunk_windows([mark("high", 20)])
    with pytest.raises(DataError, match="malformed backfill watermark"):
        parse_watermark(b'{"kind": "middle"}', (1, 0))
    with pytest.raises(DataError, match="malformed"):
        mark("high", 20, snapshot={"xmin": 5, "xmax": 3, "xip": []})
    assert isinstance(mark("low", 1), LandedWatermark)


@pytest.mark.spark
def test_spark_visibility_matches_python(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(x,) for x in XIDS], "xid long")
    unseen = invisible_to_snapshot(F.col("xid"), F.lit(SNAPSHOT.xmin), F.lit(SNAPSHOT.xmax),
                                   F.array(*(F.lit(x) for x in SNAPSHOT.xip)))
    rows = df.select("xid", unseen.alias("unseen")).collect()
    assert {r.xid: not r.unseen for r in rows} == XIDS


@pytest.mark.spark
def test_the_window_filter_of_many_chunks_stays_within_spark_connects_depth(spark):
    """64 chunks with their own snapshots (a 3M-row table at the default chunk size): one
    filter the engine accepts, true exactly for rows after the earliest low watermark or
    unseen by some snapshot."""
    from pipelines.silver.bronze_batch import window_candidates

    windows = [ChunkWindow("b", c, "public.items", (100 + 2 * c, 0), (101 + 2 * c, 0), None,
                           Snapshot(xmin=EPOCH1 + 10 * c, xmax=EPOCH1 + 10 * c + 5))
               for c in range(64)]
    rows = spark.createDataFrame([(50, 0, 3), (50, 0, 7), (50, 0, 645), (150, 0, 1)],
                                 "commit_lsn long, change_index long, xid long")
    kept = rows.filter(window_candidates(windows)).collect()
    assert sorted((r.commit_lsn, r.xid) for r in kept) == [(50, 7), (50, 645), (150, 1)]


def chunk(chunk_id, after, last, backfill="b"):
    keys = None if after == "unknown" else KeyRange(after and (after,), last and (last,))
    return ChunkWindow(backfill, chunk_id, "public.items", (chunk_id, 0), (chunk_id, 1), None,
                       None, keys=keys)


@pytest.mark.parametrize("windows, disjoint", [
    ([chunk(2, "4", "8"), chunk(1, None, "4"), chunk(3, "8", "9")], True),  # in chunk order
    ([chunk(1, None, "4"), chunk(2, "4", None), chunk(3, "4", "9")], True),  # an empty one
    ([chunk(5, "8", "12")], True),  # earlier chunks in earlier batches
    ([chunk(1, None, "4"), chunk(2, None, "8")], False),  # re-read from the first key
    ([chunk(1, None, "4"), chunk(3, "6", "9")], False),  # a chunk between not in the batch
    ([chunk(1, None, "4"), chunk(2, "4", "8", backfill="c")], False),  # another backfill
    ([chunk(1, None, "4"), chunk(2, "unknown", None)], False),  # a range not recorded
])
def test_chunks_are_disjoint_when_each_starts_where_the_one_before_ended(windows, disjoint):
    assert disjoint_keys(windows) is disjoint
