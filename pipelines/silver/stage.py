"""Stage a planned batch: run its transforms once and materialize the result.

text events -> unchanged TOAST filled -> newest event per key above the truncate floor ->
typed and cast to silver's final schema (values that cannot be typed kept aside) ->
a moved row's columns filled from its old key's row -> stale events marked (only when a
tombstone may be newer: BatchPlan.may_be_stale) -> staged (Parquet; held by the driver
for a small batch: TableScan.small) -> checked, in one action that also finds the
batch's key range and whether some event deletes a key.
With history, every event is typed and staged first (history needs them all), and the
check reads every event. Silver takes the newest per key from them; through Spark
Connect it is staged again only where it joins other rows (a moved row's old key, lone
chunk rows, tombstones).

Staged once: the check and every MERGE statement read plain files (or the driver's
rows) instead of re-running the batch's plan, and see the same events (on Sail a MERGE
whose source is itself a join also runs markedly slower).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.silver.batch import filled_events, latest_events, newest_events
from pipelines.silver.events import DELETE, OP, col, value_columns
from pipelines.silver.key_ranges import Reach, ranged_totals
from pipelines.silver.merge import STALE, mark_stale_events
from pipelines.silver.plan import BatchPlan
from pipelines.silver.tables import SilverContext, stage_every, stage_newest
from pipelines.silver.toast import fill_from_old_key_rows
from pipelines.silver.types import (
    check_failures, failure_aggregates, failures_in, typed_columns,
    with_failed_texts)


DELETES = "_cdc_deletes"  # the check's count of events that delete a key


@dataclass(frozen=True)
class StagedBatch:
    """A batch's staged events: the newest per key, stale ones marked (silver's and the
    tombstones' source; with history, maybe a pass over `every`: tables.stage_newest),
    and every event when the table keeps history."""

    newest: DataFrame
    every: DataFrame | None = None
    deletes: bool = True  # some event that is not stale deletes a key
    key_range: str | None = None  # where its keys are (key_ranges.key_range)
    key_bounds: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)  # (Ranged.bounds)
    key_reach: Reach | None = None  # key_range as data (Ranged.reach)


def stage_batch(run: SilverContext, plan: BatchPlan) -> StagedBatch:
    """Type, reduce and stage the batch; stop the table (DataError) on values that
    cannot be typed, before anything is written."""
    scan, shape = plan.scan, plan.shape
    every = None
    if run.keeps_history(scan.name):
        every = stage_every(run, _typed(plan, filled_events(plan.events, shape, plan.toast,
                                                            scan.moved)), shape, scan.small)
        source = newest_events(every, shape, plan.floor, plan.one_chunk_row_per_key)
    else:
        source = _typed(plan, latest_events(plan.events, shape, plan.floor, plan.toast,
                                            scan.moved, plan.one_chunk_row_per_key,
                                            plan.changes))
    moved = scan.moved and plan.silver_exists
    if moved:
        source = _filled_from_old_keys(run, plan, source)
    # a run that goes forward reads no tombstone (each is a toll on a classic driver)
    marks = run.read(plan.marks) if plan.may_be_stale else None
    # with history, the newest per key is one pass over the staged events unless it
    # joins other rows: a moved row's old key, lone chunk rows, tombstones
    joins = moved or plan.one_chunk_row_per_key or marks is not None
    newest = stage_newest(run, mark_stale_events(source, marks, plan.keys), shape,
                          scan.small, one_pass=every is not None and not joins)
    return _checked(newest, every, plan, deletes=bool(scan.deletes or scan.moved))


def _checked(newest: DataFrame, every: DataFrame | None, plan: BatchPlan,
             deletes: bool) -> StagedBatch:
    """The staged batch, after one action over its events (every event when the table
    keeps history, else the newest per key) that stops the table (DataError) on values
    that cannot be typed and finds the batch's key range (for a MERGE into an existing
    table; every event's keys hold the newest ones'). Over the newest events it also
    says whether one that is not stale deletes a key, if the bronze rows have deletes
    (`deletes`); with history the deletes are appended as they come (maybe none)."""
    columns = plan.shape.columns
    totals = failure_aggregates(columns)
    counted = deletes and every is None
    if counted:
        totals[DELETES] = F.count(F.when((F.col(OP) == DELETE) & ~F.col(STALE), 1))
    ranged = ranged_totals(newest if every is None else every,
                           plan.keys if plan.silver_exists else (), totals)
    check_failures(plan.shape, failures_in(ranged.totals, columns))
    found = (ranged.totals[DELETES] or 0) > 0 if counted else deletes
    return StagedBatch(newest, every, found, ranged.key_range, ranged.bounds, ranged.reach)



def _typed(plan: BatchPlan, events: DataFrame) -> DataFrame:
    """Events typed from their text, cast to silver's final column types."""
    shape, types = plan.shape, plan.types
    frame = typed_columns(with_failed_texts(events, shape.columns), shape.columns,
                          table=shape.qualified_name)
    return frame.select(*(col(n).cast(types[n]).alias(n) if n in types else col(n)
                          for n in frame.columns))


def _filled_from_old_keys(run: SilverContext, plan: BatchPlan, source: DataFrame) -> DataFrame:
    """Unchanged columns of a moved row, from its old key's row in silver (read as the
    final types: the table is not widened yet)."""
    types = plan.types
    rows = run.read(plan.silver)
    rows = rows.select(*(col(n).cast(types[n]).alias(n) for n in rows.columns))
    return fill_from_old_key_rows(source, rows, plan.old_key(), plan.keys,
                                  [c for c in value_columns(plan.shape)
                                   if c in plan.target.names])
