"""Reconcile backfill chunks with the change stream (DBLog, docs/architecture.md Silver).

A chunk's rows were read by a SELECT somewhere between its low and high watermark, so
for a key changed in that window the row may be older or newer than the change: it is
dropped, the change stream has the truth. Every other row is the key's state at the
high watermark and becomes an upsert there. A dropped row still knows the value of a
TOAST column that every window change of its key left unchanged (it did not change in
the window): it supplies that value as a partial upsert at the high watermark, which
plain DBLog loses. A truncate in the window spoils the whole chunk.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType, LongType, StringType, StructField, StructType, TimestampType)

from pipelines.position_columns import is_after
from pipelines.silver.chunk_windows import ChunkWindow, invisible_to_snapshot
from pipelines.silver.events import (
    CHANGE, CHANGE_INDEX, COMMIT_TS, LSN, OLD_KEY, OP, SNAPSHOT, UNCHANGED, UPSERT, XID, col,
    no_old_key)
from pipelines.silver.resync import generation_start

# Helper columns are prefixed _cdc_ (a prefix source columns may not use: events.py).
CHUNK = ["_cdc_backfill_id", "_cdc_chunk_id"]
WINDOW_SCHEMA = StructType([
    StructField("_cdc_backfill_id", StringType()), StructField("_cdc_chunk_id", LongType()),
    *(StructField(f"_cdc_{name}", LongType())
      for name in ("low_lsn", "low_change_index", "high_lsn", "high_change_index")),
    StructField("_cdc_high_commit_ts", TimestampType()),
    StructField("_cdc_xmin", LongType()), StructField("_cdc_xmax", LongType()),
    StructField("_cdc_xip", ArrayType(LongType())), StructField("_cdc_since_lsn", LongType())])
TRUNCATE_SCHEMA = f"{LSN} long, {CHANGE_INDEX} long, {XID} long"


def _in_window(lsn: Column, change_index: Column, xid: Column) -> Column:
    """A change counts for a chunk: strictly between its watermarks, or before the low
    one but in a transaction the chunk's snapshot did not see, of the chunk's slot
    generation (xids of an earlier generation were another server's)."""
    low, high = (F.col("_cdc_low_lsn"), F.col("_cdc_low_change_index")), \
        (F.col("_cdc_high_lsn"), F.col("_cdc_high_change_index"))
    between = is_after(lsn, change_index, *low) & is_after(*high, lsn, change_index)
    no_xip = F.array().cast(ArrayType(LongType()))
    unseen = (is_after(*low, lsn, change_index)
              & (lsn >= F.coalesce(F.col("_cdc_since_lsn"), F.lit(0)))
              & invisible_to_snapshot(xid, F.col("_cdc_xmin"), F.col("_cdc_xmax"),
                                      F.coalesce(F.col("_cdc_xip"), no_xip)))
    return between | unseen


def reconcile_chunks(chunk_rows: DataFrame, windows: DataFrame, changes: DataFrame,
                     truncates: DataFrame, keys: Sequence[str],
                     columns: Sequence[str]) -> DataFrame:
    """Chunk rows -> upsert events at their chunk's high watermark (see module doc).

    chunk_rows: _cdc_backfill_id, _cdc_chunk_id and the source columns as text;
    windows: WINDOW_SCHEMA, one row per applicable chunk;
    changes: events of the table (after expand_key_changes) that may fall in a window;
    truncates: TRUNCATE_SCHEMA, the table's truncates.
    Returns events with the columns of `changes`.
    """
    if not keys:
        raise ValueError("reconcile_chunks needs at least one key column")
    values = [c for c in columns if c not in keys]
    spoiled = (windows.crossJoin(truncates)
               .filter(_in_window(F.col(LSN), F.col(CHANGE_INDEX), F.col(XID)))
               .select(*CHUNK).distinct())
    rows = (chunk_rows.join(windows, CHUNK).join(spoiled, CHUNK, "left_anti"))

    hit = changes.select(*(col(k) for k in keys), F.col(LSN).alias("_cdc_w_lsn"),
                         F.col(CHANGE_INDEX).alias("_cdc_w_ci"), F.col(XID).alias("_cdc_w_xid"),
                         F.col(OP).alias("_cdc_w_op"), F.col(UNCHANGED).alias("_cdc_w_unchanged"))
    left_alone = {c: ((F.col("_cdc_w_op") == UPSERT)
                      & F.array_contains(F.col("_cdc_w_unchanged"), F.lit(c))).cast("int")
                  for c in values}
    hits = (rows.select(*CHUNK, *(col(k) for k in keys), "_cdc_low_lsn", "_cdc_low_change_index",
                        "_cdc_high_lsn", "_cdc_high_change_index", "_cdc_xmin", "_cdc_xmax",
                        "_cdc_xip", "_cdc_since_lsn")
            .join(hit, list(keys))
            .filter(_in_window(F.col("_cdc_w_lsn"), F.col("_cdc_w_ci"), F.col("_cdc_w_xid")))
            .groupBy(*CHUNK, *(col(k) for k in keys))
            .agg(F.count(F.lit(1)).alias("_cdc_w_hits"),
                 *(F.min(left_alone[c]).alias(f"_cdc_w_keep_{i}") for i, c in enumerate(values))))
    rows = rows.join(hits, [*CHUNK, *keys], "left")

    dropped = F.col("_cdc_w_hits").isNotNull()
    supplies = {c: dropped & (F.col(f"_cdc_w_keep_{i}") == 1) for i, c in enumerate(values)}
    supplies_any = F.lit(False)
    for supply in supplies.values():
        supplies_any = supplies_any | supply
    not_supplied = F.array(*(F.when(~supplies[c], F.lit(c)) for c in values)) if values \
        else F.array().cast(ArrayType(StringType()))
    out = {
        LSN: F.col("_cdc_high_lsn"), CHANGE_INDEX: F.col("_cdc_high_change_index"),
        COMMIT_TS: F.col("_cdc_high_commit_ts"), OP: F.lit(UPSERT),
        UNCHANGED: F.when(dropped, F.array_compact(not_supplied))
        .otherwise(F.array().cast(ArrayType(StringType()))),
        OLD_KEY: no_old_key(keys), XID: F.lit(None).cast(LongType()),
        CHANGE: F.lit(SNAPSHOT),
    }
    for c in values:
        out[c] = F.when(~dropped | supplies[c], col(c))
    for k in keys:
        out[k] = col(k)
    return (rows.filter(~dropped | supplies_any)
            .select(*(out[n].alias(n) for n in changes.columns)))



def window_rows(windows: Sequence[ChunkWindow],
                generation_starts: Sequence[int] = ()) -> list[tuple]:
    """Rows of WINDOW_SCHEMA for `windows` (local_frames.local_frame(spark, rows, WINDOW_SCHEMA));
    generation_starts: where the lake's slot generations start (resync.generation_start)."""
    return [(w.backfill_id, w.chunk_id, *w.low, *w.high, w.high_commit_ts,
             w.snapshot.xmin if w.snapshot else None, w.snapshot.xmax if w.snapshot else None,
             list(w.snapshot.xip) if w.snapshot else None,
             generation_start(generation_starts, w.low[0])) for w in windows]
