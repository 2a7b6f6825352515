"""History's rules as DataFrame transforms (chispa), on Sail and on classic Spark."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from chispa import assert_df_equality

from pipelines.positions import position_number
from pipelines.silver.history import fill_from_base, history_versions
from pipelines.silver.scan import Closing

pytestmark = pytest.mark.spark

EVENTS = ("id long, v string, w string, _lsn long, _change_index long, _commit_ts timestamp, "
          "_cdc_op string, _cdc_change string")
HISTORY = ("id long, v string, w string, _valid_from decimal(38,0), _valid_to decimal(38,0), "
           "_valid_from_ts timestamp, _valid_to_ts timestamp, _is_current boolean, _op string, "
           "_lsn long, _change_index long, _commit_ts timestamp")
EPOCH = datetime(2026, 1, 5, 8, 0)


def ts(lsn: int) -> datetime:
    return EPOCH + timedelta(seconds=lsn)


def event(key, v, w, lsn, change="update", index=0):
    op = "delete" if change == "delete" else "upsert"
    return (key, v, w, lsn, index, ts(lsn), op, change)


def version(key, v, w, start, end, opened_by, last=None):
    """A history row: from `start` to `end` (lsn, or (lsn, index)), last written at `last`."""
    def at(p):
        return None if p is None else (p, 0) if isinstance(p, int) else p
    start, end, last = at(start), at(end), at(last or start)
    return (key, v, w, Decimal(position_number(start)),
            None if end is None else Decimal(position_number(end)), ts(start[0]),
            None if end is None else ts(end[0]), end is None, opened_by, last[0], last[1],
            ts(last[0]))


def versions(spark, events, base=(), tracked=("v", "w"), closings=()):
    return history_versions(spark.createDataFrame(events, EVENTS),
                            spark.createDataFrame(list(base), HISTORY), ["id"], ["v", "w"],
                            list(tracked), closings)


def check(spark, actual, expected):
    assert_df_equality(actual, spark.createDataFrame(expected, HISTORY), ignore_row_order=True,
                       ignore_nullable=True)


def test_insert_update_delete_and_insert_again_in_any_order_and_replayed(spark):
    events = [event(1, "b", "x", 11), event(1, "a", "x", 10, "insert"),
              event(1, None, None, 12, "delete"), event(1, "c", "y", 13, "insert"),
              event(1, "b", "x", 11),  # a replayed duplicate
              event(1, "c", "y", 14)]  # an update that changed nothing
    check(spark, versions(spark, events), [
        version(1, "a", "x", 10, 11, "insert"),
        version(1, "b", "x", 11, 12, "update"),
        version(1, "c", "y", 13, None, "insert", last=14)])


def test_the_open_version_continues_and_a_delete_without_one_changes_nothing(spark):
    base = [version(1, "a", "x", 5, None, "insert")]
    events = [event(1, "b", "x", 10), event(2, None, None, 11, "delete")]
    check(spark, versions(spark, events, base), [
        version(1, "a", "x", 5, 10, "insert"),  # closed where the next version opens
        version(1, "b", "x", 10, None, "update")])


def test_a_key_change_closes_the_old_key_and_opens_the_new(spark):
    base = [version(3, "c", "x", 5, None, "insert")]
    events = [event(3, None, None, 14, "delete"), event(30, "c", "x", 14)]
    check(spark, versions(spark, events, base), [
        version(3, "c", "x", 5, 14, "insert"), version(30, "c", "x", 14, None, "update")])


def test_a_truncate_closes_every_open_version_before_it(spark):
    base = [version(1, "a", "x", 5, None, "insert"), version(2, "b", "x", 6, None, "insert")]
    events = [event(1, "a2", "x", 8), event(1, "a3", "x", 12, "insert")]
    truncate = Closing((10, 0), int((ts(10) - datetime(1970, 1, 1)).total_seconds() * 10**6),
                       (10, 0))
    actual = versions(spark, events, base[:1], closings=[truncate])
    check(spark, actual, [
        version(1, "a", "x", 5, 8, "insert"), version(1, "a2", "x", 8, 10, "update"),
        version(1, "a3", "x", 12, None, "insert")])


def test_a_resync_end_closes_only_versions_last_written_at_or_below_its_floor(spark):
    base = [version(1, "a", "x", 5, None, "insert"),
            version(2, "b", "x", 6, None, "insert", last=(9, 0))]  # re-read by the resync
    end = Closing((20, 0), None, (7, 0))
    actual = versions(spark, [event(1, "a", "x", 25, "insert"), event(2, "b2", "x", 21)],
                      base, closings=[end])
    gone = version(1, "a", "x", 5, 20, "insert")
    check(spark, actual, [
        gone[:6] + (None,) + gone[7:],  # the resync's end has no commit time here
        version(1, "a", "x", 25, None, "insert"),
        version(2, "b", "x", 6, 21, "insert", last=(9, 0)),
        version(2, "b2", "x", 21, None, "update")])


def test_backfill_rows_never_split_an_open_version(spark):
    base = [version(1, "a", "x", 5, None, "insert")]
    events = [event(1, "a", "x", 20, "snapshot"),  # the same row, read by a chunk
              event(2, "b", None, 19),  # a change before its chunk: w never sent
              event(2, "b", "w2", 20, "snapshot"),  # the chunk completes it
              event(3, "c", "x", 20, "snapshot")]  # a row only the chunk knows
    check(spark, versions(spark, events, base), [
        version(1, "a", "x", 5, None, "insert", last=20),
        version(2, "b", "w2", 19, None, "update", last=20),
        version(3, "c", "x", 20, None, "snapshot")])


def test_untracked_columns_update_the_version_in_place(spark):
    events = [event(1, "a", "x", 10, "insert"), event(1, "a", "y", 11),
              event(1, "b", "y", 12), event(1, "b", "z", 13)]
    check(spark, versions(spark, events, tracked=["v"]), [
        version(1, "a", "y", 10, 12, "insert", last=11),
        version(1, "b", "z", 12, None, "update", last=13)])


def test_unchanged_toast_values_come_from_the_base_version_or_the_old_keys(spark):
    from pyspark.sql import functions as F

    schema = EVENTS + ", _cdc_unchanged array<string>, _cdc_old_key struct<id:string>"
    events = spark.createDataFrame([
        (1, "a2", None, 10, 0, ts(10), "upsert", "update", ["w"], None),
        (30, "c2", None, 11, 0, ts(11), "upsert", "update", ["w"], {"id": "3"}),
        (4, "d", None, 12, 0, ts(12), "upsert", "insert", [], None)], schema)
    base = spark.createDataFrame([version(1, "a", "big", 5, None, "insert"),
                                  version(3, "c", "huge", 6, None, "insert")], HISTORY)
    filled = fill_from_base(events, base, ["id"], ["v", "w"],
                            [F.col("_cdc_old_key.id").cast("long")])
    assert sorted((r.id, r.w) for r in filled.collect()) == [(1, "big"), (4, None),
                                                             (30, "huge")]
