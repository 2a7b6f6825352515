"""Last-writer-wins: per key, the event with the highest position survives."""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

POSITION = ("_lsn", "_change_index")


def latest_change_per_key(events: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Keep one row per key: the one with the highest (_lsn, _change_index)."""
    if not keys:
        raise ValueError("latest_change_per_key needs at least one key column")
    newest_first = Window.partitionBy(*keys).orderBy(*(F.col(c).desc() for c in POSITION))
    return (events.withColumn("_rank", F.row_number().over(newest_first))
            .filter(F.col("_rank") == 1).drop("_rank"))
