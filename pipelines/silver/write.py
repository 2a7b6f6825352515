"""Write a staged batch: evolve the tables (DDL), apply a new truncate floor, then write
silver (a new table by a plain write of its first batch, an existing one by MERGE),
append the batch's deletes to its tombstones, expire old tombstones, and write the
history table.

The MERGE reads the staged events (pipelines.silver.stage) within the batch's key ranges
(pipelines.silver.key_ranges), so the engines can skip the files the batch cannot touch. On
a classic Spark driver a MERGE costs about ten jobs and a write one or two: the
tombstones are a log of deletes, appended to, and a new table's first batch is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from pipelines.catalog import save_table
from pipelines.positions import Position
from pipelines.silver import history_tables
from pipelines.silver.events import CHANGE_INDEX, COMMIT_TS, DELETE, LSN, OP, UNCHANGED, col
from pipelines.silver.evolution import SchemaPlan
from pipelines.silver.merge import (
    STALE, at_or_below, committed_before, insert_select_sql, silver_merge_sql)
from pipelines.silver.plan import BatchPlan
from pipelines.silver.stage import StagedBatch
from pipelines.silver.tables import (
    METADATA_FIELDS, SilverContext, conformed, create_table, delete_where, evolve,
    file_statistics, holds_none_of, skips_files, write_tombstones)

log = logging.getLogger(__name__)

EXPIRE_EVERY = timedelta(hours=1)  # of bronze time: how often tombstones are expired
_expired_at: dict[str, int] = {}  # tombstone table -> bronze time of its last expiry here


@dataclass(frozen=True)
class Applied:
    """What applying one table's batch changed beyond rows."""

    floor: Position | None  # the table's truncate floor now
    columns_added: tuple[str, ...] = ()
    columns_widened: tuple[str, ...] = ()


def write_batch(run: SilverContext, plan: BatchPlan, staged: StagedBatch,
                newest_commit_micros: int | None) -> Applied:
    """Apply the staged batch to silver, its tombstones and its history table."""
    _evolve_tables(run, plan)
    _apply_floor(run, plan)
    fresh = staged.newest.filter(~F.col(STALE)).select(
        *(col(n) for n in [*plan.carried, LSN, CHANGE_INDEX, COMMIT_TS, OP, UNCHANGED]))
    _write_silver(run, plan, staged, fresh)
    _write_marks(run, plan, fresh if staged.deletes else None)
    expire = _expiry_horizon(run, plan, newest_commit_micros)
    if expire is not None:
        delete_where(run, plan.marks, committed_before(expire))
    if staged.every is not None:  # its key range is every event's (stage._checked)
        history_tables.apply(run, plan.scan, plan.shape, staged.every, plan.after, plan.final,
                             plan.old_key(), plan.toast, plan.replace_tables,
                             staged.key_range)
    run.maintenance.register(run.spark, plan.shape.schema, plan.shape.table, plan.silver)
    added, widened = plan.schema.new, plan.schema.widen
    if added or widened:
        log.info("silver %s: added columns %s, widened %s", plan.shape.qualified_name,
                 [f.name for f in added], sorted(widened))
    return Applied(plan.floor, tuple(f.name for f in added), tuple(sorted(widened)))


def _write_silver(run: SilverContext, plan: BatchPlan, staged: StagedBatch,
                  fresh: DataFrame) -> None:
    """MERGE the batch into silver. A new (or replaced) table takes its upserts by a
    plain write instead, which is what the MERGE would insert into an empty table; a
    table that can hold none of the batch's keys (a first load's later slices) takes
    them by an append, which is what the MERGE would insert there."""
    keys, columns = plan.keys, plan.final.names
    exists = plan.silver_exists
    files = file_statistics(plan.silver) if exists and staged.key_bounds else None
    if exists and not holds_none_of(files, staged.key_bounds):
        run.maintenance.prepare(run.spark, plan.silver, keys)  # before the MERGE writes
        key_range = staged.key_range if skips_files(files, staged.key_reach) else None
        run.merge(plan.silver, lambda view: silver_merge_sql(
            plan.silver.sql, view, keys, columns, plan.carried, plan.toast, key_range),
            run.unique_source(fresh, keys))
        return
    rows = run.query(plan.silver, lambda view: insert_select_sql(
        view, keys, columns, plan.carried, plan.toast), fresh)
    if exists:
        save_table(conformed(rows, run.schema(plan.silver)).write.format("delta")
                   .mode("append"), plan.silver)
    else:
        create_table(run, plan.silver, plan.final, plan.replace_tables, rows)
    run.maintenance.prepare(run.spark, plan.silver, keys)


def _apply_floor(run: SilverContext, plan: BatchPlan) -> None:
    """Delete what a new truncate floor removes from the existing tables, before the
    batch's own rows (all above it) are written."""
    if plan.new_floor is None:
        return
    existing = [t for t, exists in ((plan.silver, plan.silver_exists),
                                    (plan.marks, plan.marked is not None)) if exists]
    for target in existing:
        delete_where(run, target, at_or_below(plan.new_floor))


def _write_marks(run: SilverContext, plan: BatchPlan, fresh: DataFrame | None) -> None:
    """Append the batch's deletes (in `fresh`; None: it has none) to the tombstones, or
    create the table with them."""
    schema = _marks_schema(plan)
    deleted = None if fresh is None else conformed(fresh.filter(F.col(OP) == DELETE), schema)
    write_tombstones(plan.marks, schema, deleted, create=plan.marked is None,
                     replace_table=plan.replace_tables)


def _evolve_tables(run: SilverContext, plan: BatchPlan) -> None:
    """Evolve silver and its tombstones to the batch's schema, where they exist (the
    batch's first write creates the others)."""
    if plan.silver_exists:
        evolve(run, plan.silver, plan.target, plan.schema)
    if plan.marked is not None:
        keys = plan.keys
        evolve(run, plan.marks, plan.marked,
               SchemaPlan(widen={k: v for k, v in plan.schema.widen.items() if k in keys}))


def _marks_schema(plan: BatchPlan) -> StructType:
    """A tombstone table's columns: the key, and the delete's position and commit time."""
    types = plan.types
    return StructType([StructField(k, types[k], True) for k in plan.keys]
                      + list(METADATA_FIELDS))


def _expiry_horizon(run: SilverContext, plan: BatchPlan,
                    newest_commit_micros: int | None) -> int | None:
    """The retention horizon when this run should expire the table's tombstones, else None.

    Expiring visits every tombstone of the table (no key range narrows it): once per
    EXPIRE_EVERY of bronze time in a
    process (and in its first run) is enough for a retention counted in hours, and only
    when the log's statistics say some tombstone is older than the horizon.
    """
    if newest_commit_micros is None:
        return None
    marks = plan.marks
    last = _expired_at.get(marks.sql)
    every = EXPIRE_EVERY // timedelta(microseconds=1)
    if last is not None and newest_commit_micros - last < every:
        return None
    horizon = newest_commit_micros - run.retention // timedelta(microseconds=1)
    if plan.marks_bounds is None or plan.marks_bounds.oldest_micros >= horizon:
        return None
    _expired_at[marks.sql] = newest_commit_micros
    return horizon
