"""The text-level steps of one silver batch, chained: events in, one event per key out."""

from __future__ import annotations

from typing import Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.position_columns import is_after_position
from pipelines.positions import Position
from pipelines.silver.events import CHANGE, CHANGE_INDEX, LSN, SNAPSHOT, value_columns
from pipelines.silver.latest import latest_change_per_key
from pipelines.silver.table_shape import TableShape
from pipelines.silver.toast import fill_unchanged_toast


def above_floor(events: DataFrame, floor: Position | None) -> DataFrame:
    """Drop events at or below a truncate's position: the truncate removed them."""
    if floor is None:
        return events
    return events.filter(is_after_position(F.col(LSN), F.col(CHANGE_INDEX), floor))


def filled_events(events: DataFrame, shape: TableShape,
                  toast_columns: Sequence[str] | None = None,
                  moved_rows: bool = True) -> DataFrame:
    """Expanded (and reconciled) events -> every event, TOAST-filled within the batch.

    toast_columns: the only columns any event may leave unchanged (default: every value
    column); moved_rows=False: no event has an old key. The fill is a window over the
    whole batch, the batch's costliest step, so a batch in which no event left a column
    unchanged skips it, and one without key changes skips its first pass.
    """
    fill = value_columns(shape) if toast_columns is None else toast_columns
    return fill_unchanged_toast(events, shape.key_columns, fill, moved_rows)


def newest_events(events: DataFrame, shape: TableShape, floor: Position | None,
                  one_chunk_row_per_key: bool = False) -> DataFrame:
    """Filled events -> the newest event per key, above the floor (one_chunk_row_per_key:
    see `lone_chunk_rows`)."""
    if one_chunk_row_per_key:
        return _lone_rows_apart(events, shape, floor, events.filter(F.col(CHANGE) != SNAPSHOT),
                                lambda others: newest_events(others, shape, None))
    return above_floor(latest_change_per_key(events, shape.key_columns), floor)


def latest_events(events: DataFrame, shape: TableShape, floor: Position | None = None,
                  toast_columns: Sequence[str] | None = None,
                  moved_rows: bool = True, one_chunk_row_per_key: bool = False,
                  changes: DataFrame | None = None) -> DataFrame:
    """Expanded (and reconciled) events -> TOAST-filled, newest event per key, above floor.

    one_chunk_row_per_key: the chunk rows are (see `lone_chunk_rows`), and `changes` are
    the other events (None: there are none, so every event is its key's only one)."""
    if one_chunk_row_per_key:
        if changes is None:
            return above_floor(events, floor)
        return _lone_rows_apart(events, shape, floor, changes, lambda others: latest_events(
            others, shape, None, toast_columns, moved_rows))
    return newest_events(filled_events(events, shape, toast_columns, moved_rows), shape, floor)


def _lone_rows_apart(events: DataFrame, shape: TableShape, floor: Position | None,
                     changes: DataFrame, reduce: Callable[[DataFrame], DataFrame]
                     ) -> DataFrame:
    """The lone chunk rows as they are, `reduce` over the other events, above the floor."""
    alone, others = lone_chunk_rows(events, shape.key_columns, changes)
    return above_floor(alone.unionByName(reduce(others)), floor)


def lone_chunk_rows(events: DataFrame, keys: Sequence[str], changes: DataFrame
                    ) -> tuple[DataFrame, DataFrame]:
    """Events -> (the chunk rows whose key no change of the batch has, every other event);
    `changes`: the events that are not chunk rows (passed apart, a plan need not compute
    the chunk rows once more to find the keys they change).

    Only for a batch whose chunk rows are one per key (bronze_batch.ChunkShapes): a lone
    chunk row is then its key's only event, which filling and ordering leave as it is,
    so only the other events need them, and a first load of a large backfill skips
    ordering most of its rows by key. A moved row's old key has a delete event of its own
    (key_change.expand_key_changes): its chunk row is not alone.
    """
    rows = events.filter(F.col(CHANGE) == SNAPSHOT)
    changed = changes.select(*keys)
    alone = rows.join(changed, list(keys), "left_anti").select(*events.columns)
    shared = rows.join(changed, list(keys), "left_semi").select(*events.columns)
    return alone, shared.unionByName(changes)
