"""The text-level steps of one silver batch, chained: events in, one event per key out."""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.position_columns import is_after_position
from pipelines.positions import Position
from pipelines.silver.events import CHANGE_INDEX, LSN, value_columns
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


def newest_events(events: DataFrame, shape: TableShape, floor: Position | None) -> DataFrame:
    """Filled events -> the newest event per key, above the floor."""
    return above_floor(latest_change_per_key(events, shape.key_columns), floor)


def latest_events(events: DataFrame, shape: TableShape, floor: Position | None = None,
                  toast_columns: Sequence[str] | None = None,
                  moved_rows: bool = True) -> DataFrame:
    """Expanded (and reconciled) events -> TOAST-filled, newest event per key, above floor."""
    return newest_events(filled_events(events, shape, toast_columns, moved_rows), shape, floor)
