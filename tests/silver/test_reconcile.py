from datetime import datetime, timezone

import pytest

from pipelines.silver.reconcile import (
    TRUNCATE_SCHEMA, WINDOW_SCHEMA, reconcile_chunks, window_rows)
from pipelines.silver.chunk_windows import ChunkWindow, Snapshot
from tests.support.bronze_builder import assert_frames

pytestmark = pytest.mark.spark

EVENTS = ("id string, name string, doc string, _lsn long, _change_index long, "
          "_commit_ts timestamp, _cdc_op string, _cdc_unchanged array<string>, "
          "_cdc_old_key struct<id:string>, _cdc_xid long")
ROWS = "_cdc_backfill_id string, _cdc_chunk_id long, id string, name string, doc string"
HIGH_TS = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
EPOCH1 = 1 << 32  # xids of the snapshot are 64-bit, in epoch 1; bronze xids are 32-bit
SNAPSHOT = Snapshot(xmin=EPOCH1 + 5, xmax=EPOCH1 + 20, xip=(EPOCH1 + 7,))


def change(id_, lsn, op="upsert", unchanged=(), xid=100, name="n", doc="d"):
    return (id_, name, doc, lsn, 0, None, op, list(unchanged), None, xid)


def test_chunk_rows_are_dropped_when_changed_in_the_window_else_upserted_at_high(spark):
    windows = spark.createDataFrame(window_rows([
        ChunkWindow("b1", 1, "public.items", (100, 0), (200, 0), HIGH_TS, SNAPSHOT),
        ChunkWindow("b1", 2, "public.items", (300, 0), (400, 0), HIGH_TS, None),
    ]), WINDOW_SCHEMA)
    rows = spark.createDataFrame([
        ("b1", 1, str(i), f"name{i}", f"D{i}") for i in range(1, 11)
    ] + [("b1", 2, "20", "x", "y"), ("b1", 3, "30", "never", "applied")], ROWS)
    changes = spark.createDataFrame([
        change("2", 150, unchanged=["doc"], doc=None),  # window, doc left alone: supplied
        change("3", 150),  # window, both columns sent: dropped, nothing supplied
        change("4", 50, xid=3),  # before low, committed before the snapshot: kept
        change("5", 50, xid=7),  # before low, but running for the snapshot: dropped
        change("6", 50, xid=25, unchanged=["name"], name=None),  # xid >= xmax: name supplied
        change("7", 150, op="delete", name=None, doc=None),  # deleted in the window
        change("8", 250),  # after high: not in the window, wins later by position
        change("9", 120, unchanged=["doc"], doc=None),  # two window changes, both leave doc
        change("9", 130, unchanged=["doc"], doc=None),
        change("10", 50, xid=4294967290),  # wraps around: long before xmin, visible
        change("20", 50),
    ], EVENTS)
    truncates = spark.createDataFrame([(350, 0, 1)], TRUNCATE_SCHEMA)  # spoils chunk 2

    def upsert(id_, name, doc, unchanged=()):
        return (id_, name, doc, 200, 0, HIGH_TS, "upsert", list(unchanged), None, None)
    expected = spark.createDataFrame([
        upsert("1", "name1", "D1"),
        upsert("2", None, "D2", ["name"]),
        upsert("4", "name4", "D4"),
        upsert("6", "name6", None, ["doc"]),
        upsert("8", "name8", "D8"),
        upsert("9", None, "D9", ["name"]),
        upsert("10", "name10", "D10"),
    ], EVENTS)
    actual = reconcile_chunks(rows, windows, changes, truncates, ["id"], ["id", "name", "doc"])
    assert_frames(actual, expected, ["id"])
