"""Where a batch's keys are, as literals a statement's `ON` or `WHERE` can carry.

The engines skip the files whose key statistics fall outside (Sail with deletion vectors,
delta-spark, Databricks), so a MERGE of recent keys reads the files that hold recent
keys, not the whole table; a join condition alone gives them nothing to skip with.

The ranges come from one action over the batch, which can carry other totals of the
batch (the stage's checks): on a classic Spark driver each action is a toll of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType, DateType, IntegerType, LongType, ShortType, StringType)

from pipelines.names import quote, spark_literal
from pipelines.silver.events import col

MAX_KEY_RANGES = 8
_INTEGER_TYPES = (ByteType, ShortType, IntegerType, LongType)
_LITERAL_TYPES = (*_INTEGER_TYPES, StringType, DateType)


@dataclass(frozen=True)
class Reach:
    """A key range over one integer key column: its name and (least, greatest) ranges."""

    key: str
    ranges: tuple[tuple[int, int], ...]

    def misses(self, least: int, greatest: int) -> bool:
        """Whether no key in [least, greatest] (a file's statistics) is in the ranges."""
        return all(greatest < low or least > high for low, high in self.ranges)


@dataclass(frozen=True)
class Ranged:
    """A batch's key range (None: no key column has a literal form, or no row), the
    totals asked for with it (by name), and the least and greatest value of each key
    column that has a literal form."""

    key_range: str | None
    totals: Mapping[str, Any]
    bounds: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    reach: Reach | None = None  # the key range as data, when one integer column is all of it


def key_range(batch: DataFrame, keys: Sequence[str]) -> str | None:
    """For each key column that has a literal form (integers, strings, dates) a `t.k
    BETWEEN <least> AND <greatest>`, the columns joined by AND; None when no key column
    has one. One action.

    The first integer key column is split at its largest gaps, into up to MAX_KEY_RANGES
    ranges ORed: one old key among recent ones (a late correction, a probe row) would
    otherwise stretch one range over the whole table. Every key of the batch is inside
    the ranges, so a MERGE matches the same rows.
    """
    return ranged_totals(batch, keys).key_range


def ranged_totals(batch: DataFrame, keys: Sequence[str],
                  totals: Mapping[str, Column] | None = None) -> Ranged:
    """key_range of `batch` and `totals` (aggregate Columns by name, over the whole
    batch), in one action (none when neither is asked for)."""
    totals = dict(totals or {})
    kinds = {f.name: f.dataType for f in batch.schema.fields}
    ranged = [k for k in keys if isinstance(kinds[k], _LITERAL_TYPES)]
    if not ranged and not totals:
        return Ranged(None, {})
    cut = next((k for k in ranged if isinstance(kinds[k], _INTEGER_TYPES)), None)
    bounds = {f"_lo{i}": F.min(col(k)) for i, k in enumerate(ranged)}
    bounds.update({f"_hi{i}": F.max(col(k)) for i, k in enumerate(ranged)})
    if cut is None:
        row = batch.agg(*(c.alias(n) for n, c in {**bounds, **totals}.items())).first()
        return Ranged(_sql(ranged, row, None), {n: row[n] for n in totals},
                      _bounds(ranged, row))
    rows = _gap_starts(batch, cut, {**bounds, **totals})
    if not rows:  # an empty batch
        return Ranged(None, {n: None for n in totals})
    index = ranged.index(cut)
    ranges = _cut_ranges(rows, index)
    reach = Reach(cut, tuple(ranges)) if ranged == [cut] and ranges else None
    return Ranged(_sql(ranged, rows[0], (index, ranges)),
                  {n: rows[0][n] for n in totals}, _bounds(ranged, rows[0]), reach)


def _bounds(ranged: Sequence[str], row: Row) -> dict[str, tuple[Any, Any]]:
    return {k: (row[f"_lo{i}"], row[f"_hi{i}"]) for i, k in enumerate(ranged)
            if row[f"_lo{i}"] is not None}


def _gap_starts(batch: DataFrame, key: str, aggregates: Mapping[str, Column]) -> list[Row]:
    """The rows that start a range of `key` (the least value, then the widest gaps that
    skip a value; none between consecutive integers, nor between equal ones), each also
    carrying `aggregates` over the whole batch; at least one row unless the batch is
    empty. A gap that overflows only moves a cut: the bounds are the values themselves."""
    # one partition either way (a batch's keys); named, so PySpark does not warn about it
    whole = Window.partitionBy(F.lit(0))
    value = col(key)
    edges = batch.select(value.alias("_v"), F.lag(value).over(whole.orderBy(value))
                         .alias("_before"),
                         *(c.over(whole).alias(n) for n, c in aggregates.items()))
    gap = F.col("_v") - F.col("_before")
    # null keys (values that failed typing) sort last: they only carry the totals
    return (edges.filter(F.col("_before").isNull() | (gap > 1))
            .orderBy(F.col("_v").isNull(), F.desc_nulls_first(gap))
            .limit(MAX_KEY_RANGES).collect())


def _cut_ranges(starts: Sequence[Row], index: int) -> list[tuple[int, int]]:
    """[(least, greatest)] per range of the cut key (the `index`-th ranged), in order."""
    starts = sorted((r for r in starts if r["_v"] is not None), key=lambda r: r["_v"])
    if not starts:
        return []
    ends = [r["_before"] for r in starts[1:]] + [starts[0][f"_hi{index}"]]
    return [(r["_v"], end) for r, end in zip(starts, ends)]


def _sql(ranged: Sequence[str], row: Row,
         cut: tuple[int, list[tuple[Any, Any]]] | None) -> str | None:
    """The key range: the cut column's ranges (cut: its index and ranges), the other
    columns' bounds."""
    terms = []
    for i, key in enumerate(ranged):
        ranges = cut[1] if cut is not None and i == cut[0] else \
            [(row[f"_lo{i}"], row[f"_hi{i}"])]
        if not ranges or ranges[0][0] is None:  # no key: an empty batch
            return None
        between = [f"t.{quote(key)} BETWEEN {spark_literal(low)} AND {spark_literal(high)}"
                   for low, high in ranges]
        terms.append(between[0] if len(between) == 1 else f"({' OR '.join(between)})")
    return " AND ".join(terms) or None
