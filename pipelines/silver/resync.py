"""The floor a finished resync sets: what silver deletes once a table's resync is done.

A resync is a backfill (docs/backfill.md) that ends with a "resync" watermark. Every key
the source still has was read by one of its chunks after its first low watermark, so from
that watermark on each such row is written again at a newer position (a chunk's high
watermark, or a change in a chunk's window). A row still at or below the floor is one the
source no longer has: deleted while the slot was lost, or committed on a primary that
failed before its standby received it. The floor acts like a truncate's (apply.py): rows
at or below it that the batch does not write go, and older events can never come back.

One exception moves the floor down: a transaction that committed just before the first
low watermark but was still running for a chunk's snapshot is not in that chunk; its
changes count as window changes and keep their own, earlier positions. By the same
visibility argument as the chunks' windows (a transaction still running for a later
snapshot was running for every earlier one), the earliest applied chunk's snapshot
names all of them; only changes of the resync's own slot generation can be among them
(xids of other generations are another server's).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType

from pipelines.errors import DataError
from pipelines.names import split_table
from pipelines.position_columns import is_before_position
from pipelines.positions import Position
from pipelines.silver.chunk_windows import LandedWatermark, invisible_to_snapshot


def generation_start(starts: Sequence[int], lsn: int) -> int:
    """The lake LSN at which the slot generation holding `lsn` starts."""
    return starts[max(0, bisect_right(starts, lsn) - 1)] if starts else 0


def resync_floor(changes: DataFrame, table: str, marks: Sequence[LandedWatermark],
                 starts: Sequence[int]) -> Position:
    """The floor of the resync whose watermarks (all of them, any kind) are `marks`."""
    lows = [m.position for m in marks if m.kind == "low"]
    if not lows:
        raise DataError(f"the resync of {table} ended, but bronze/changes holds none of its "
                        "low watermarks; bronze is incomplete: run `lakehouse backfill "
                        f"--resync {table}` again")
    start = min(lows)
    lows_by_chunk = {m.chunk_id: m.position for m in marks if m.kind == "low"}
    seen = [m for m in marks if m.kind == "high" and m.snapshot is not None]
    earliest = start
    if seen:
        first = min(seen, key=lambda m: lows_by_chunk.get(m.chunk_id, m.position))
        snap = first.snapshot
        schema, name = split_table(table)
        unseen = (changes
                  .filter((F.col("schema_name") == schema) & (F.col("table_name") == name))
                  .filter(F.col("commit_lsn") >= F.lit(generation_start(starts, start[0])))
                  .filter(is_before_position(F.col("commit_lsn"), F.col("change_index"),
                                             start))
                  .filter(invisible_to_snapshot(
                      F.col("xid"), F.lit(snap.xmin), F.lit(snap.xmax),
                      F.array(*(F.lit(x) for x in snap.xip)).cast(ArrayType(LongType()))))
                  .agg(F.min(F.struct("commit_lsn", "change_index")).alias("first"))
                  .collect()[0].first)
        if unseen is not None:
            earliest = min(earliest, (unseen.commit_lsn, unseen.change_index))
    return earliest[0], earliest[1] - 1  # just before: the floor is "at or below"
