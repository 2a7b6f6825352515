"""Updates that change the primary key become a delete of the old key plus an upsert."""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from pipelines.silver.events import (
    CHANGE, DELETE, METADATA, OLD_KEY, OP, UNCHANGED, XID, col, field)


def expand_key_changes(events: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Add a delete of the old key, at the update's position, for every key change.

    The upsert keeps _cdc_old_key: its unchanged TOAST values belong to the old key's row.
    """
    if not keys:
        raise ValueError("expand_key_changes needs at least one key column")
    moved = events.filter(F.col(OLD_KEY).isNotNull())
    old_key = {k: field(F.col(OLD_KEY), k) for k in keys}
    replaced = {
        OP: F.lit(DELETE),
        CHANGE: F.lit(DELETE),
        UNCHANGED: F.array().cast(ArrayType(StringType())),
        OLD_KEY: F.when(F.lit(False), F.col(OLD_KEY)),  # a typed null
        **old_key,
    }
    kept = set(METADATA) | {XID}
    deletes = moved.select(*(
        replaced[name].alias(name) if name in replaced
        else col(name) if name in kept
        else F.lit(None).cast(StringType()).alias(name)
        for name in events.columns))
    return events.unionByName(deletes)
