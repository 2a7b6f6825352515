"""Where a silver batch ends when bronze holds more new rows than one batch should.

A first run after a large backfill, or a run after silver was stopped for a while, would
otherwise apply every new bronze row in one batch, and the local engine holds a batch in
memory while it orders or merges it. Such a run is applied in slices of at most
`silver.max_batch_rows` change and chunk rows, each recorded in progress like a run of
its own; the chunk rows of a new table's first load, proven one row per key, stream
into its write and do not count (scan.scan_bronze). A slice ends between two commit LSNs, so a transaction is never split; it
holds at least one bucket of commits, however large (one huge transaction still applies
at once).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.bronze.schema import OP_DELETE, OP_INSERT, OP_UPDATE
from pipelines.positions import Position

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
              chunks: Iterable[tuple[Position, int]], limit: int
              ) -> tuple[Position, bool] | None:
    """Where a slice of at most `limit` rows ends, and whether it is one bucket that
    alone holds more (True: a finer count inside it may cut it); None when all fit.

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
        if total > limit:
            if taken is None:  # the first bucket alone
                return (first_lsn + (bucket + 1) * width - 1, LAST_INDEX), True
            return (first_lsn + (taken + 1) * width - 1, LAST_INDEX), False
        taken = bucket
    return None


def first_slice_end(rows: DataFrame, first_lsn: int, last_lsn: int,
                    chunks: list[tuple[Position, int]], limit: int) -> Position | None:
    """The end of the first slice of `rows` (new bronze/changes rows with commit LSNs
    first_lsn..last_lsn) and `chunks`; None when all fit in `limit` rows.

    A first bucket that alone holds more than the limit (a dense burst, e.g. a backfill
    that ran while silver was stopped for long) is counted again in finer buckets, down
    to a single commit LSN: one transaction is applied whole, however large.
    """
    low, high, end = first_lsn, last_lsn, None
    while True:
        width = bucket_width(low, high)
        in_range = rows.filter(F.col("commit_lsn").between(low, high))
        cut = slice_end(low, width, change_rows_per_bucket(in_range, low, width),
                        [c for c in chunks if low <= c[0][0] <= high], limit)
        if cut is None:  # all fit (a finer count of a crowded bucket never gets here)
            return end
        end, crowded = cut
        if not crowded or width == 1:
            return end
        low, high = end[0] - width + 1, end[0]
