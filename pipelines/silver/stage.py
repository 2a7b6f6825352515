"""Stage a planned batch: run its transforms once and materialize the result.

text events -> unchanged TOAST filled -> newest event per key above the truncate floor ->
typed and cast to silver's final schema (values that cannot be typed kept aside) ->
a moved row's columns filled from its old key's row -> stale events marked -> staged
(Parquet) -> checked, in one aggregate that also finds whether the tombstones change.
With history, every event is typed and staged first (history needs them all; silver
takes the newest per key from them).

Staged once: the check and every MERGE statement read plain files instead of re-running
the batch's plan, and see the same events (on Sail a MERGE whose source is itself a join
also runs markedly slower).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.silver.batch import filled_events, latest_events, newest_events
from pipelines.silver.events import col, value_columns
from pipelines.silver.merge import REVIVES, mark_stale_events
from pipelines.silver.plan import BatchPlan
from pipelines.silver.tables import SilverContext, stage_every, stage_newest
from pipelines.silver.toast import fill_from_old_key_rows
from pipelines.silver.types import (
    check_failures, failure_aggregates, failures_in, failures_of, typed_columns,
    with_failed_texts)


@dataclass(frozen=True)
class StagedBatch:
    """A batch's staged events: the newest per key, stale ones marked (silver's and the
    tombstones' source), and every event when the table keeps history."""

    newest: DataFrame
    every: DataFrame | None = None
    marks_change: bool = True  # some event deletes a key or revives a deleted one


def stage_batch(run: SilverContext, plan: BatchPlan) -> StagedBatch:
    """Type, reduce and stage the batch; stop the table (DataError) on values that
    cannot be typed, before anything is written."""
    scan, shape = plan.scan, plan.shape
    every = None
    if run.keeps_history(scan.name):
        every = stage_every(run, _typed(plan, filled_events(plan.events, shape, plan.toast,
                                                            scan.moved)), shape)
        check_failures(shape, failures_of(every, shape.columns))
        source = newest_events(every, shape, plan.floor)
    else:
        source = _typed(plan, latest_events(plan.events, shape, plan.floor, plan.toast,
                                            moved_rows=scan.moved))
    if scan.moved and plan.silver_exists:
        source = _filled_from_old_keys(run, plan, source)
    # no tombstone: nothing to read (a classic Spark driver pays jobs for each snapshot)
    marks = run.read(plan.marks) if plan.marks_oldest is not None else None
    newest = stage_newest(run, mark_stale_events(source, marks, plan.keys), shape)
    deletes = bool(scan.deletes or scan.moved)  # bronze deletes, or a key change's old key
    revives = _check(newest, plan, checked=every is None,  # else checked above, every event
                     count_revives=marks is not None and not deletes)
    return StagedBatch(newest, every, deletes or revives)


def _check(newest: DataFrame, plan: BatchPlan, checked: bool, count_revives: bool) -> bool:
    """One aggregate over the staged events (none when nothing is asked): stop the table
    (DataError) on values that cannot be typed, if `checked`; whether some upsert revives
    a deleted key, if `count_revives` (else False)."""
    columns = plan.shape.columns if checked else ()
    aggregates = failure_aggregates(columns)
    if count_revives:
        aggregates.append(F.count(F.when(F.col(REVIVES), 1)).alias(REVIVES))
    if not aggregates:
        return False
    row = newest.agg(*aggregates).collect()[0]
    check_failures(plan.shape, failures_in(row, columns))
    return count_revives and row[REVIVES] > 0


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
