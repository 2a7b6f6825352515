"""Where a silver batch ends when bronze holds more new rows than one batch should.

A first run after a large backfill, or a run after silver was stopped for a while, would
otherwise apply every new bronze row in one batch, and the local engine holds a batch in
memory (about 0.5 GB per million rows, measured). Such a run is applied in slices of at
most `silver.max_batch_rows` change and chunk rows, each recorded in progress like a run
of its own. A slice ends between two commit LSNs, so a transaction is never split; it
holds at least one bucket of commits, however large (one huge transaction still applies
at once).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.bronze.schema import OP_DELETE, OP_INSERT, OP_UPDATE
from pipelines.silver.watermarks import Position

BUCKETS = 1024  # commit-LSN buckets the new rows are counted in: a slice ends at one's end
LAST_INDEX = (1 << 63) - 1  # a position after every change of a commit LSN


def bucket_width(first_lsn: int, last_lsn: int) -> int:
    """Bucket width that spreads commit LSNs first_lsn..last_lsn over at most BUCKETS."""
    return (last_lsn - first_lsn) // BUCKETS + 1


def change_rows_per_bucket(rows: DataFrame, first_lsn: int, width: int) -> dict[int, int]:
    """Row changes (insert, update, delete) per bucket of `rows` (bronze/changes rows)."""
    bucket = F.floor((F.col("commit_lsn") - F.lit(first_lsn)) / F.lit(width)).cast("long")
    counted = (rows.filter(F.col("op").isin(OP_INSERT, OP_UPDATE, OP_DELETE))
               .groupBy(bucket.alias("bucket")).count().collect())
    return {r.bucket: r["count"] for r in counted}


def slice_end(first_lsn: int, width: int, change_rows: Mapping[int, int],
              chunks: Iterable[tuple[Position, int]], limit: int) -> Position | None:
    """The last position of a slice of at most `limit` rows; None when all rows fit.

    change_rows: row changes per bucket (bucket b holds commit LSNs
    first_lsn + b * width .. first_lsn + (b + 1) * width - 1); chunks: each applicable
    backfill chunk's high watermark position and row count (a chunk applies at its high
    watermark, so its rows count in that bucket).
    """
    rows = Counter(change_rows)
    for (lsn, _), count in chunks:
        rows[(lsn - first_lsn) // width] += count
    total = 0
    taken = None
    for bucket in sorted(rows):
        total += rows[bucket]
        if total > limit and taken is not None:
            return first_lsn + (taken + 1) * width - 1, LAST_INDEX
        taken = bucket
    return None
