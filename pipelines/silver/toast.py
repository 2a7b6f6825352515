"""Unchanged TOAST values: fill them from the latest earlier event of the same row.

Postgres does not resend a large (TOASTed) value an UPDATE left alone. Within a batch
the value comes from the latest earlier event of the same key (an INSERT and a partial
UPDATE of one key in one batch must not lose the column); what stays unresolved is
kept from the silver row by the MERGE, or, for a row whose key changed, from the old
key's silver row (see `fill_from_old_key_rows`).
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines.silver.events import (
    CHANGE_INDEX, DELETE, LSN, OLD_KEY, OP, UNCHANGED, UPSERT, col, field)


def _ordered(partition: Sequence[Column]) -> Window:
    # At one position a moved row's upsert sorts before the delete of its old key, so
    # the upsert still sees the old key's last values.
    return (Window.partitionBy(*partition)
            .orderBy(LSN, CHANGE_INDEX, (F.col(OP) == DELETE).cast("int"))
            .rowsBetween(Window.unboundedPreceding, -1))


def _unchanged(name: str) -> Column:
    return F.array_contains(F.col(UNCHANGED), F.lit(name))


def _resolve(events: DataFrame, columns: Sequence[str], windows: dict[str, Column],
             targets: Column) -> DataFrame:
    """Set each unchanged column of the `targets` rows to windows[c].v where found.

    Each window is computed once, into a column of its own: the engines do not share a
    window expression used several times, so each use would be a window function of its
    own, each carrying a copy of the value through the shuffle."""
    names = {c: f"_cdc_found_{i}" for i, c in enumerate(columns)}
    events = events.select("*", *(windows[c].alias(names[c]) for c in columns))
    found = {c: F.col(names[c]) for c in columns}
    resolved = {c: targets & _unchanged(c) & found[c].isNotNull()
                & field(found[c], "from").isNull() for c in columns}
    inherited = [F.when(targets & _unchanged(c), field(found[c], "from")) for c in columns]
    updates = {c: F.when(resolved[c], field(found[c], "v")).otherwise(col(c))
               for c in columns}
    updates[UNCHANGED] = F.array_except(
        F.col(UNCHANGED), F.array(*(F.when(resolved[c], F.lit(c)) for c in columns)))
    updates[OLD_KEY] = F.coalesce(F.col(OLD_KEY), *inherited) if inherited else F.col(OLD_KEY)
    return events.select(*(updates[n].alias(n) if n in updates else col(n)
                           for n in events.columns if n not in names.values()))


def fill_unchanged_toast(events: DataFrame, keys: Sequence[str], columns: Sequence[str],
                         moved_rows: bool = True) -> DataFrame:
    """Fill unchanged columns from the latest earlier event of the row, in two passes.

    1. Moved rows (key-changing updates) look at the old key's earlier events.
    2. Every other row looks at its own key's earlier events; a moved row whose value is
       still unknown passes its old key on, so the value can come from that silver row.

    moved_rows=False promises that no event has an old key: the first pass, a window
    over the whole batch, is skipped.
    """
    if not keys:
        raise ValueError("fill_unchanged_toast needs at least one key column")
    if not columns:
        return events
    old_key = F.col(OLD_KEY)
    moved = old_key.isNotNull()
    no_source = F.when(F.lit(False), old_key)  # a null of the old key's struct type

    def known(c: str) -> Column:  # what an event tells about column c, or null
        return (F.when(F.col(OP) == DELETE, F.struct(F.lit(None).cast("string").alias("v"),
                                                    no_source.alias("from")))
                .when(~_unchanged(c), F.struct(col(c).alias("v"), no_source.alias("from"))))

    if moved_rows:
        first = _ordered([F.coalesce(field(old_key, k), col(k)) for k in keys])
        from_old_key = {c: F.last(F.when(~moved, known(c)), ignorenulls=True).over(first)
                        for c in columns}
        events = _resolve(events, columns, from_old_key, moved)

    second = _ordered([col(k) for k in keys])

    def known_or_barrier(c: str) -> Column:
        # A moved row that still misses c: later events of its key must not look past
        # it (into the key's earlier life) but take c from the old key's silver row.
        barrier = F.struct(F.lit(None).cast("string").alias("v"), old_key.alias("from"))
        return F.when(moved & (F.col(OP) == UPSERT) & _unchanged(c), barrier).otherwise(known(c))

    seen = known_or_barrier if moved_rows else known
    from_own_key = {c: F.last(seen(c), ignorenulls=True).over(second) for c in columns}
    return _resolve(events, columns, from_own_key, ~moved)


def fill_from_old_key_rows(events: DataFrame, silver: DataFrame, old_key: Sequence[Column],
                           keys: Sequence[str], columns: Sequence[str]) -> DataFrame:
    """Unchanged values of moved rows from the old key's silver row (typed events).

    old_key: the typed old key values of each event, aligned with `keys`; `columns`: the
    value columns both the events and the silver table have.
    """
    if not columns:
        return events
    old = silver.select(*(col(k).alias(f"_cdc_ok_{i}") for i, k in enumerate(keys)),
                        *(col(c).alias(f"_cdc_ov_{j}") for j, c in enumerate(columns)))
    on = None
    for i, value in enumerate(old_key):
        match = value == F.col(f"_cdc_ok_{i}")
        on = match if on is None else on & match
    found = F.col(OLD_KEY).isNotNull() & F.col("_cdc_ok_0").isNotNull()
    take = {c: found & _unchanged(c) for c in columns}
    updates = {c: F.when(take[c], F.col(f"_cdc_ov_{j}")).otherwise(col(c))
               for j, c in enumerate(columns)}
    updates[UNCHANGED] = F.array_except(
        F.col(UNCHANGED), F.array(*(F.when(take[c], F.lit(c)) for c in columns)))
    return (events.join(old, on, "left")
            .select(*(updates[n].alias(n) if n in updates else col(n) for n in events.columns)))
