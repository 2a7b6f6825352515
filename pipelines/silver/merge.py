"""The statements that apply one batch of events to a silver table and its tombstones.

Plain Spark SQL, the same on Sail and Databricks (docs/architecture.md portability rules): a row
changes only for an event at a higher position, so replays and re-runs are no-ops.

    silver (live rows only)                   tombstones (sidecar, a log of deletes)
    upsert newer than row  -> update/insert   the batch's deletes -> appended
    delete newer than row  -> delete row
    truncate floor         -> drop rows <= it  floor / retention  -> drop old ones

A new silver table takes its first batch by a plain write of the batch's upserts
(`insert_select_sql`: the MERGE's INSERT clause as a SELECT), not by a MERGE.

Events not newer than their key's newest tombstone are left out of the silver MERGE's
source (`mark_stale_events`). That can only happen when the tombstones hold a delete
newer than the table's progress (a replay of older bronze, or a re-run after a crash):
a run that goes forward carries only events newer than every tombstone, so it reads
none. The silver MERGE runs before the tombstones are appended: if the job stops
between the two, the re-run sees the old tombstones, decides the same, and finishes.

`target` is a table as Spark SQL names it (TableRef.sql, pipelines.catalog): a Delta path
on the local engines, a Unity Catalog name on Databricks. Nothing else differs.
"""

from __future__ import annotations

from typing import Collection, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.names import quote, spark_string
from pipelines.position_columns import is_after, sql_before, sql_is_after
from pipelines.positions import Position
from pipelines.silver.events import (
    CHANGE_INDEX, COMMIT_TS, DELETE, LSN, OP, UNCHANGED, UPSERT, col)

STALE = "_cdc_stale"


def _newer(source: str = "s", target: str = "t") -> str:
    return sql_is_after(f"{source}.{LSN}", f"{source}.{CHANGE_INDEX}", f"{target}.{LSN}",
                        f"{target}.{CHANGE_INDEX}")


def at_or_below(floor: Position) -> str:
    """A target row at or below a truncate's floor, as a condition of delete_where_sql."""
    return sql_before(f"t.{LSN}", f"t.{CHANGE_INDEX}", floor, inclusive=True)


def committed_before(micros: int) -> str:
    """A target row committed before `micros` (Unix microseconds): an expired tombstone."""
    return f"t.{COMMIT_TS} < timestamp_micros({int(micros)})"


def _on(keys: Sequence[str], key_range: str | None) -> str:
    equal = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
    return f"{equal} AND {key_range}" if key_range else equal


def silver_merge_sql(target: str, source: str, keys: Sequence[str],
                     target_columns: Sequence[str], source_columns: Sequence[str],
                     unchanged: Collection[str] | None = None,
                     key_range: str | None = None) -> str:
    """MERGE of the events view `source` into the silver table `target`.

    target_columns: every column of the target table (after schema evolution);
    source_columns: the source columns the events carry. Target columns the source no
    longer has (dropped in Postgres) become NULL in rows the batch writes. An unchanged
    TOAST column keeps the target's value; `unchanged` names the only columns an event
    may leave unchanged (None: any), the others are copied without a test.
    `key_range`: the batch's key_range (rows outside it are never matched).
    """
    columns = _Columns(keys, source_columns, unchanged)
    updates = ", ".join(f"{quote(n)} = {columns.value(n, f't.{quote(n)}')}"
                        for n in target_columns if n not in keys)
    names = ", ".join(quote(n) for n in target_columns)
    return (f"MERGE INTO {target} t USING {source} s ON {_on(keys, key_range)}\n"
            f"WHEN MATCHED AND s.{OP} = '{DELETE}' AND {_newer()} THEN DELETE\n"
            f"WHEN MATCHED AND s.{OP} = '{UPSERT}' AND {_newer()} THEN UPDATE SET {updates}\n"
            f"WHEN NOT MATCHED AND s.{OP} = '{UPSERT}' THEN INSERT ({names}) VALUES "
            f"({', '.join(columns.inserted(target_columns))})")


def proven_unique(events: DataFrame, keys: Sequence[str]) -> DataFrame:
    """The staged events (one per key already) as an aggregate grouped by the keys, for a
    MERGE through Spark Connect. Sail's MERGE takes only such a source as one row per key:
    it then skips its cardinality check and pushes the ON clause's key range into the
    Delta scan, so target files outside the range are not read (measured at 10M rows, 100k
    changes of recent keys: 0.72-0.93 s against 1.25-1.58 s). first() of a one-row group
    is that row; without ORDER BY it costs no sort, unlike max_by."""
    values = [c for c in events.columns if c not in keys]
    return events.groupBy(*(col(k) for k in keys)).agg(
        *(F.first(col(c)).alias(c) for c in values))


def insert_select_sql(source: str, keys: Sequence[str], target_columns: Sequence[str],
                      source_columns: Sequence[str],
                      unchanged: Collection[str] | None = None) -> str:
    """The rows silver_merge_sql inserts into a table that has none, as a SELECT over the
    events view `source`: a new table's first batch is written, not merged."""
    columns = _Columns(keys, source_columns, unchanged)
    values = ", ".join(f"{value} AS {quote(n)}" for n, value in
                       zip(target_columns, columns.inserted(target_columns)))
    return f"SELECT {values} FROM {source} s WHERE s.{OP} = '{UPSERT}'"


class _Columns:
    """The value each target column takes from an event: the event's own, or, for a
    column it left unchanged (TOAST), the target's (updates) or NULL (inserts)."""

    def __init__(self, keys: Sequence[str], source_columns: Sequence[str],
                 unchanged: Collection[str] | None) -> None:
        self.keys, self.unchanged = keys, unchanged
        self.carried = set(source_columns) | {LSN, CHANGE_INDEX, COMMIT_TS}

    def value(self, name: str, otherwise: str) -> str:
        if name not in self.carried:
            return "NULL"
        if name in self.keys or name in (LSN, CHANGE_INDEX, COMMIT_TS) or (
                self.unchanged is not None and name not in self.unchanged):
            return f"s.{quote(name)}"
        return (f"CASE WHEN array_contains(s.{UNCHANGED}, {spark_string(name)}) "
                f"THEN {otherwise} ELSE s.{quote(name)} END")

    def inserted(self, target_columns: Sequence[str]) -> list[str]:
        return [self.value(n, "NULL") for n in target_columns]


def delete_where_sql(target: str, condition: str, source: str | None = None) -> str:
    """Delete the target's rows that meet `condition` (on `t`): Delta's DELETE, which
    reads only the files the condition may match; with `source` (any empty relation) a
    MERGE instead, for a Spark Connect session, which may be Sail's (no DELETE for Delta
    tables)."""
    if source is None:
        return f"DELETE FROM {target} t WHERE {condition}"
    return (f"MERGE INTO {target} t USING {source} s ON FALSE\n"
            f"WHEN NOT MATCHED BY SOURCE AND {condition} THEN DELETE")


def update_where_sql(target: str, assignments: str, condition: str,
                     source: str | None = None) -> str:
    """Set `assignments` on the target's rows that meet `condition` (on `t`): Delta's
    UPDATE, or with `source` (any empty relation) a MERGE, as delete_where_sql."""
    if source is None:
        return f"UPDATE {target} t SET {assignments} WHERE {condition}"
    return (f"MERGE INTO {target} t USING {source} s ON FALSE\n"
            f"WHEN NOT MATCHED BY SOURCE AND {condition} THEN UPDATE SET {assignments}")


def add_columns_merge_sql(target: str, source: str) -> str:
    """Add the columns of `source` (an empty relation of the table's new schema) that the
    target lacks: Sail evolves schemas only through MERGE WITH SCHEMA EVOLUTION;
    delta-spark needs Delta's autoMerge set while it runs (docs/architecture.md, rule 3)."""
    return (f"MERGE WITH SCHEMA EVOLUTION INTO {target} t USING {source} s ON FALSE "
            "WHEN NOT MATCHED THEN INSERT *")


def mark_stale_events(events: DataFrame, tombstones: DataFrame | None,
                      keys: Sequence[str]) -> DataFrame:
    """`events` plus STALE: not newer than the key's newest tombstone (None: no event
    is). A stale or replayed event must not resurrect a deleted row, so the silver MERGE
    leaves stale events out. A key may have several tombstones (it was deleted again, or
    a re-run appended them twice): the newest decides."""
    if tombstones is None:
        return events.withColumn(STALE, F.lit(False))
    newest = F.max(F.struct(F.col(LSN).alias("lsn"), F.col(CHANGE_INDEX).alias("ci")))
    marks = tombstones.groupBy(*(col(k) for k in keys)).agg(newest.alias("_cdc_t"))
    newer = is_after(F.col(LSN), F.col(CHANGE_INDEX), F.col("_cdc_t.lsn"), F.col("_cdc_t.ci"))
    return (events.join(marks, list(keys), "left")
            .select(*(col(c) for c in events.columns),
                    (F.col("_cdc_t").isNotNull() & ~newer).alias(STALE)))
