"""The MERGE statements that apply one batch of events to a silver table and its tombstones.

Plain Spark SQL, the same on Sail and Databricks (docs/architecture.md portability rules): a row
changes only for an event at a higher position, so replays and re-runs are no-ops.

    silver (live rows only)                   tombstones (sidecar, same key)
    upsert newer than row  -> update/insert   delete newer than tombstone -> record it
    delete newer than row  -> delete row      upsert newer than tombstone -> drop it
    truncate floor         -> drop rows <= it  floor / retention           -> drop old ones

Events not newer than a key's tombstone are left out of the silver MERGE's source
(`mark_stale_events`). The silver MERGE runs first: if the job stops between the
two statements, the re-run sees the old tombstones, decides the same, and finishes.

`target` is a table as Spark SQL names it (TableRef.sql, pipelines.catalog): a Delta path
on the local engines, a Unity Catalog name on Databricks. Nothing else differs.
"""

from __future__ import annotations

from typing import Collection, Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType, DateType, IntegerType, LongType, ShortType, StringType)

from pipelines.names import quote, spark_literal, spark_string
from pipelines.position_columns import is_after, sql_before, sql_is_after
from pipelines.positions import Position
from pipelines.silver.events import (
    CHANGE_INDEX, COMMIT_TS, DELETE, LSN, OP, UNCHANGED, UPSERT, col)

STALE = "_cdc_stale"
REVIVES = "_cdc_revives"  # an upsert newer than its key's tombstone, which it removes


def _newer(source: str = "s", target: str = "t") -> str:
    return sql_is_after(f"{source}.{LSN}", f"{source}.{CHANGE_INDEX}", f"{target}.{LSN}",
                        f"{target}.{CHANGE_INDEX}")


def _at_or_below(floor: Position, alias: str = "t") -> str:
    return sql_before(f"{alias}.{LSN}", f"{alias}.{CHANGE_INDEX}", floor, inclusive=True)


def _on(keys: Sequence[str], key_range: str | None) -> str:
    equal = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
    return f"{equal} AND {key_range}" if key_range else equal


def key_range(batch: DataFrame, keys: Sequence[str]) -> str | None:
    """Where the batch's keys are, as literals the engines skip target files with: for
    each key column that has a literal form (integers, strings, dates) a `t.k BETWEEN
    <least> AND <greatest>` (integers: up to MAX_KEY_RANGES such ranges, ORed), the
    columns joined by AND; None when no key column has one.

    The engines skip the files whose key statistics fall outside (Sail with deletion
    vectors, delta-spark, Databricks), so a MERGE of recent keys reads the files that
    hold recent keys, not the whole table; a join condition alone gives them nothing to
    skip with. An integer key is split at its largest gaps: one old key among recent
    ones (a late correction, a probe row) would otherwise stretch one range over the
    whole table. Every key of the batch is inside the ranges, so the MERGE matches the
    same rows.
    """
    kinds = {f.name: f.dataType for f in batch.schema.fields}
    terms = []
    for key in keys:
        if isinstance(kinds[key], _INTEGER_TYPES):
            ranges = _integer_ranges(batch, key)
        elif isinstance(kinds[key], (StringType, DateType)):
            ranges = [tuple(batch.agg(F.min(col(key)), F.max(col(key))).first())]
        else:
            continue
        if not ranges or ranges[0][0] is None:  # an empty batch
            return None
        between = [f"t.{quote(key)} BETWEEN {spark_literal(low)} AND {spark_literal(high)}"
                   for low, high in ranges]
        terms.append(between[0] if len(between) == 1 else f"({' OR '.join(between)})")
    return " AND ".join(terms) or None


MAX_KEY_RANGES = 8
_INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)


def _integer_ranges(batch: DataFrame, key: str) -> list[tuple[int, int]]:
    """The batch's values of an integer key, cut at the MAX_KEY_RANGES - 1 widest gaps
    between neighbours (none between consecutive integers, nor between equal ones):
    [(least, greatest)] per range, in order. One action: each job is a toll on a
    classic Spark driver."""
    values = batch.select(col(key).alias("v")).filter(F.col("v").isNotNull())
    # one partition either way (a batch's keys); named, so PySpark does not warn about it
    whole = Window.partitionBy(F.lit(0))
    edges = values.select("v", F.lag("v").over(whole.orderBy("v")).alias("before"),
                          F.max("v").over(whole).alias("greatest"))
    gap = F.col("v") - F.col("before")
    # the least value (no neighbour below) first, then the widest gaps that skip a value;
    # a gap that overflows only moves a cut: the bounds are the values themselves
    starts = (edges.filter(F.col("before").isNull() | (gap > 1))
              .orderBy(F.desc_nulls_first(gap)).limit(MAX_KEY_RANGES).collect())
    starts = sorted(starts, key=lambda r: r.v)
    ends = [r.before for r in starts[1:]] + [starts[-1].greatest if starts else None]
    return [(r.v, end) for r, end in zip(starts, ends)]


def silver_merge_sql(target: str, source: str, keys: Sequence[str],
                     target_columns: Sequence[str], source_columns: Sequence[str],
                     floor: Position | None = None,
                     unchanged: Collection[str] | None = None,
                     key_range: str | None = None) -> str:
    """MERGE of the events view `source` into the silver table `target`.

    target_columns: every column of the target table (after schema evolution);
    source_columns: the source columns the events carry. Target columns the source no
    longer has (dropped in Postgres) become NULL in rows the batch writes. An unchanged
    TOAST column keeps the target's value; `unchanged` names the only columns an event
    may leave unchanged (None: any), the others are copied without a test. `floor`: a
    truncate in this batch; rows at or below it that the batch does not write are deleted.
    `key_range`: the batch's key_range (rows outside it are never matched, so the floor
    still reaches them).
    """
    carried = set(source_columns) | {LSN, CHANGE_INDEX, COMMIT_TS}

    def maybe_unchanged(name: str, otherwise: str) -> str:
        if name in keys or name in (LSN, CHANGE_INDEX, COMMIT_TS) or (
                unchanged is not None and name not in unchanged):
            return f"s.{quote(name)}"
        return (f"CASE WHEN array_contains(s.{UNCHANGED}, {spark_string(name)}) "
                f"THEN {otherwise} ELSE s.{quote(name)} END")

    def value(name: str) -> str:
        return maybe_unchanged(name, f"t.{quote(name)}") if name in carried else "NULL"

    def inserted(name: str) -> str:
        return maybe_unchanged(name, "NULL") if name in carried else "NULL"

    updates = ", ".join(f"{quote(n)} = {value(n)}" for n in target_columns if n not in keys)
    names = ", ".join(quote(n) for n in target_columns)
    values = ", ".join(inserted(n) for n in target_columns)
    sql = (f"MERGE INTO {target} t USING {source} s ON {_on(keys, key_range)}\n"
           f"WHEN MATCHED AND s.{OP} = '{DELETE}' AND {_newer()} THEN DELETE\n"
           f"WHEN MATCHED AND s.{OP} = '{UPSERT}' AND {_newer()} THEN UPDATE SET {updates}\n"
           f"WHEN NOT MATCHED AND s.{OP} = '{UPSERT}' THEN INSERT ({names}) VALUES ({values})")
    if floor is not None:
        sql += f"\nWHEN NOT MATCHED BY SOURCE AND {_at_or_below(floor)} THEN DELETE"
    return sql


def tombstone_merge_sql(target: str, source: str, keys: Sequence[str],
                        floor: Position | None = None,
                        expire_before_micros: int | None = None,
                        key_range: str | None = None) -> str:
    """MERGE of the same events into the tombstone table (keys + position + commit time).

    Tombstones at or below a new truncate `floor` or committed before
    `expire_before_micros` (the retention horizon, Unix microseconds) are removed.
    """
    meta = [LSN, CHANGE_INDEX, COMMIT_TS]
    names = ", ".join(quote(n) for n in [*keys, *meta])
    values = ", ".join(f"s.{quote(n)}" for n in [*keys, *meta])
    sql = (f"MERGE INTO {target} t USING {source} s ON {_on(keys, key_range)}\n"
           f"WHEN MATCHED AND s.{OP} = '{DELETE}' AND {_newer()} THEN UPDATE SET "
           + ", ".join(f"{n} = s.{n}" for n in meta) + "\n"
           f"WHEN MATCHED AND s.{OP} = '{UPSERT}' AND {_newer()} THEN DELETE\n"
           f"WHEN NOT MATCHED AND s.{OP} = '{DELETE}' THEN INSERT ({names}) VALUES ({values})")
    expired = []
    if floor is not None:
        expired.append(_at_or_below(floor))
    if expire_before_micros is not None:
        expired.append(f"t.{COMMIT_TS} < timestamp_micros({int(expire_before_micros)})")
    if expired:
        sql += f"\nWHEN NOT MATCHED BY SOURCE AND ({' OR '.join(expired)}) THEN DELETE"
    return sql


def floor_merge_sql(target: str, source: str, floor: Position) -> str:
    """Remove the rows at or below a truncate floor (`source`: any empty relation)."""
    return (f"MERGE INTO {target} t USING {source} s ON FALSE\n"
            f"WHEN NOT MATCHED BY SOURCE AND {_at_or_below(floor)} THEN DELETE")


def add_columns_merge_sql(target: str, source: str) -> str:
    """Add the columns of `source` (an empty relation of the table's new schema) that the
    target lacks: Sail evolves schemas only through MERGE WITH SCHEMA EVOLUTION;
    delta-spark needs Delta's autoMerge set while it runs (docs/architecture.md, rule 3)."""
    return (f"MERGE WITH SCHEMA EVOLUTION INTO {target} t USING {source} s ON FALSE "
            "WHEN NOT MATCHED THEN INSERT *")


def mark_stale_events(events: DataFrame, tombstones: DataFrame | None,
                      keys: Sequence[str]) -> DataFrame:
    """`events` plus STALE: not newer than the key's tombstone, and REVIVES: an upsert
    newer than it. A stale or replayed event must not resurrect a deleted row, so the
    silver MERGE leaves stale events out; a batch with no delete and nothing that
    revives a key leaves the tombstones as they are."""
    if tombstones is None:
        return events.withColumns({STALE: F.lit(False), REVIVES: F.lit(False)})
    marks = tombstones.select(*(col(k) for k in keys), F.col(LSN).alias("_cdc_t_lsn"),
                              F.col(CHANGE_INDEX).alias("_cdc_t_ci"))
    newer = is_after(F.col(LSN), F.col(CHANGE_INDEX), F.col("_cdc_t_lsn"), F.col("_cdc_t_ci"))
    marked = F.col("_cdc_t_lsn").isNotNull()
    return (events.join(marks, list(keys), "left")
            .select(*(col(c) for c in events.columns), (marked & ~newer).alias(STALE),
                    (marked & newer & (F.col(OP) == UPSERT)).alias(REVIVES)))
