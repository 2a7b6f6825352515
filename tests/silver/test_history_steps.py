"""history_versions' steps, one at a time (chispa), on Sail and on classic Spark.

One key column `id` and one tracked value column `v`; a row at LSN n commits at ts(n).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from chispa import assert_df_equality

from pipelines.positions import position_number
from pipelines.silver.history import (
    combined_stream, version_edges, versions_from_edges, with_closings, with_next,
    with_openings)
from pipelines.silver.scan import Closing

pytestmark = pytest.mark.spark

ROW = "id long, v string, _lsn long, _change_index long, _commit_ts timestamp"
EVENTS = f"{ROW}, _cdc_op string, _cdc_change string"
HISTORY = ("id long, v string, _valid_from decimal(38,0), _valid_to decimal(38,0), "
           "_valid_from_ts timestamp, _valid_to_ts timestamp, _is_current boolean, _op string, "
           "_lsn long, _change_index long, _commit_ts timestamp")
STREAM = (f"{ROW}, _cdc_h_op string, _cdc_h_kind string, _cdc_h_pos decimal(38,0), "
          "_cdc_h_from decimal(38,0), _cdc_h_from_ts timestamp, _cdc_h_opened_by string")
CLOSED = f"{STREAM}, _cdc_h_closed decimal(38,0), _cdc_h_closed_ts timestamp"
OPENINGS = f"{CLOSED}, _cdc_h_has_prev boolean, _cdc_h_opens boolean"
NEIGHBOURS = (f"{OPENINGS}, _cdc_h_has_next boolean, _cdc_h_next_op string, "
              "_cdc_h_next_opens boolean, _cdc_h_next_pos decimal(38,0), "
              "_cdc_h_next_ts timestamp")
EDGES = (f"{ROW}, _cdc_h_starts boolean, _cdc_h_last boolean, _cdc_h_from decimal(38,0), "
         "_cdc_h_from_ts timestamp, _cdc_h_opened_by string, _valid_to decimal(38,0), "
         "_valid_to_ts timestamp")
EPOCH = datetime(2026, 1, 5, 8, 0)
FIRST, OPENS, CONTINUES = (False, False), (True, True), (True, False)  # with_openings
NO_NEXT = (False, None, None, None, None)
OPEN = (None, None)  # no closing closes the row


def ts(lsn: int) -> datetime:
    return EPOCH + timedelta(seconds=lsn)


def micros(lsn: int) -> int:
    return int((ts(lsn) - datetime(1970, 1, 1)).total_seconds() * 10**6)


def number(lsn: int, index: int = 0) -> Decimal:
    return Decimal(position_number((lsn, index)))


def change(key: int, v: str | None, lsn: int, kind: str = "update", index: int = 0) -> tuple:
    """A stream row of an event: a version it opens starts at itself."""
    op = "delete" if kind == "delete" else "upsert"
    return (key, v, lsn, index, ts(lsn), op, kind, number(lsn, index), number(lsn, index),
            ts(lsn), kind)


def based(key: int, v: str, start: int, last: int) -> tuple:
    """A stream row of a base version inserted at `start`, last written at `last`."""
    return (key, v, last, 0, ts(last), "upsert", "base", number(last), number(start),
            ts(start), "insert")


def after(lsn: int, opens: bool, op: str = "upsert", index: int = 0) -> tuple:
    """What with_next gives a row whose key's next row is at `lsn`."""
    return (True, op, opens, number(lsn, index), ts(lsn))


def edge(row: tuple, starts: bool, last: bool, to: int | None = None,
         to_ts: datetime | None = None) -> tuple:
    """A stream row as an edge: its values, its version's start, where it would end."""
    end = None if to is None else number(to)
    return row[:5] + (starts, last) + row[8:11] + (end, to_ts or (None if to is None else ts(to)))


def check(spark, actual, expected, schema: str) -> None:
    assert_df_equality(actual, spark.createDataFrame(expected, schema), ignore_row_order=True,
                       ignore_nullable=True)


def test_events_and_base_versions_make_one_stream(spark):
    events = spark.createDataFrame([(1, "a", 10, 0, ts(10), "upsert", "update"),
                                    (2, None, 11, 1, ts(11), "delete", "delete")], EVENTS)
    base = spark.createDataFrame([(1, "z", number(5), None, ts(5), None, True, "insert",
                                   7, 0, ts(7))], HISTORY)
    check(spark, combined_stream(events, base, ["id"], ["v"]), [
        change(1, "a", 10), change(2, None, 11, "delete", index=1), based(1, "z", 5, 7)],
        STREAM)


def test_each_row_knows_the_first_closing_that_closes_it(spark):
    truncate = Closing((10, 0), micros(10), (10, 0))
    resync_end = Closing((20, 0), None, (15, 0))  # re-read everything up to its floor
    stream = [change(1, "a", 5), change(2, "b", 10), change(3, "c", 12), change(4, "d", 17)]
    check(spark, with_closings(spark.createDataFrame(stream, STREAM), [resync_end, truncate]), [
        change(1, "a", 5) + (number(10), ts(10)),  # the truncate comes first
        change(2, "b", 10) + (number(20), None),  # at the truncate, not before it
        change(3, "c", 12) + (number(20), None),
        change(4, "d", 17) + OPEN],  # above the resync's floor
        CLOSED)


def test_without_closings_no_row_is_closed(spark):
    stream = [change(1, "a", 5)]
    check(spark, with_closings(spark.createDataFrame(stream, STREAM), []),
          [change(1, "a", 5) + OPEN], CLOSED)


def test_a_row_opens_a_version_where_the_row_before_it_of_its_key_allows(spark):
    stream = [change(1, "b", 12) + (number(15), ts(15)), based(1, "a", 5, 7) + OPEN,
              change(2, None, 11, "delete") + OPEN, change(1, "a", 10, index=1) + OPEN,
              change(3, "c", 8, "insert") + (number(10), ts(10)),
              change(3, "c", 12, "insert") + OPEN,
              based(4, "a", 5, 5) + OPEN, change(4, "d", 20, "snapshot") + OPEN]
    actual = with_openings(spark.createDataFrame(stream, CLOSED), ["id"], ["v"])
    check(spark, actual, [  # key 1 in position order: 7, (10, 1), 12
        stream[1] + FIRST,  # a base row opens nothing: its version is open
        stream[3] + CONTINUES,  # the same values continue the version
        stream[0] + OPENS,  # other values open one
        stream[2] + FIRST,  # another key's rows are not its neighbours; a delete opens none
        stream[4] + (False, True),  # the first change of its key opens one
        stream[5] + OPENS,  # the same values, but its key's version was closed at 10
        stream[6] + FIRST,
        stream[7] + CONTINUES],  # a backfill row never splits a version
        OPENINGS)


def test_only_untracked_columns_changing_leaves_the_rows_the_same(spark):
    stream = [change(1, "a", 10) + OPEN, change(1, "b", 12) + OPEN]
    actual = with_openings(spark.createDataFrame(stream, CLOSED), ["id"], [])
    check(spark, actual, [stream[0] + (False, True), stream[1] + CONTINUES], OPENINGS)


def test_each_row_sees_the_row_after_it_of_its_key(spark):
    stream = [based(1, "a", 5, 7) + OPEN + FIRST, change(1, "a", 10, index=1) + OPEN + CONTINUES,
              change(1, "b", 12) + (number(15), ts(15)) + OPENS,
              change(2, None, 11, "delete") + OPEN + FIRST,
              change(3, "c", 13, "insert") + OPEN + (False, True)]
    actual = with_next(spark.createDataFrame(stream, OPENINGS), ["id"])
    check(spark, actual, [
        stream[0] + after(10, False, index=1), stream[1] + after(12, True),
        stream[2] + NO_NEXT,
        stream[3] + NO_NEXT,  # the row after it is another key's
        stream[4] + NO_NEXT], NEIGHBOURS)


def test_edges_are_the_rows_that_open_or_last_write_a_version(spark):
    base, same, changed = based(1, "a", 5, 7), change(1, "a", 10), change(1, "b", 12)
    closed, reopened = change(3, "c", 8, "insert"), change(3, "c", 12, "insert")
    deleted = change(2, None, 11, "delete")
    kept, snapshot = based(4, "a", 5, 5), change(4, "d", 20, "snapshot")
    stream = [
        base + OPEN + FIRST + after(10, False),
        same + OPEN + CONTINUES + after(12, True),
        changed + OPEN + OPENS + NO_NEXT,
        closed + (number(10), ts(10)) + (False, True) + after(12, True),
        reopened + OPEN + OPENS + NO_NEXT,
        deleted + OPEN + FIRST + NO_NEXT,
        kept + OPEN + FIRST + after(20, False),
        snapshot + OPEN + CONTINUES + NO_NEXT]
    check(spark, version_edges(spark.createDataFrame(stream, NEIGHBOURS), ["id"], ["v"]), [
        edge(base, starts=True, last=False, to=10),  # the same values continue it
        edge(same, starts=False, last=True, to=12),  # the next row changes v
        edge(changed, starts=True, last=True),
        edge(closed, starts=True, last=True, to=10),  # closed before the next row
        edge(reopened, starts=True, last=True),  # its key's version was closed
        edge(kept, starts=True, last=False, to=20),  # a backfill row never splits it
        edge(snapshot, starts=False, last=True)],  # the delete alone is no version's
        EDGES)


def test_a_version_is_its_first_edges_start_and_its_last_edges_values(spark):
    base, same, changed = based(1, "a", 5, 7), change(1, "a", 10), change(1, "b", 12)
    closed = change(3, "c", 8, "insert")
    edges = [edge(base, True, False, to=10), edge(same, False, True, to=12),
             edge(changed, True, True), edge(closed, True, True, to=10, to_ts=ts(10))]
    check(spark, versions_from_edges(spark.createDataFrame(edges, EDGES), ["id"], ["v"]), [
        (1, "a", number(5), number(12), ts(5), ts(12), False, "insert", 10, 0, ts(10)),
        (1, "b", number(12), None, ts(12), None, True, "update", 12, 0, ts(12)),
        (3, "c", number(8), number(10), ts(8), ts(10), False, "insert", 8, 0, ts(8))],
        HISTORY)
