"""Write a staged batch: create or evolve the tables (DDL), MERGE into silver and then
into its tombstones (when the batch deletes a key, revives one, truncates or expires
tombstones: a MERGE costs a classic Spark driver about ten jobs), then the history table.

Every statement reads the staged events (pipelines.silver.stage) within the batch's key
ranges (merge.key_range), so the engines can skip the files the batch cannot touch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from pipelines.positions import Position
from pipelines.silver import history_tables
from pipelines.silver.events import CHANGE_INDEX, COMMIT_TS, DELETE, LSN, OP, UNCHANGED, col
from pipelines.silver.evolution import SchemaPlan
from pipelines.silver.merge import (
    REVIVES, STALE, key_range, silver_merge_sql, tombstone_merge_sql)
from pipelines.silver.plan import BatchPlan
from pipelines.silver.stage import StagedBatch
from pipelines.silver.tables import (
    METADATA_FIELDS, SOURCE_VIEW, SilverContext, create_table, evolve)

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
    _prepare_tables(run, plan)
    keys, carried = plan.keys, [c.name for c in plan.shape.columns]
    bounds = key_range(staged.newest, keys)
    fresh = staged.newest.filter(~F.col(STALE)).select(
        *(col(n) for n in [*carried, LSN, CHANGE_INDEX, COMMIT_TS, OP, UNCHANGED]))
    run.merge(silver_merge_sql(plan.silver.sql, SOURCE_VIEW, keys, plan.final.names, carried,
                               plan.merge_floor, plan.toast, bounds), fresh)
    expire = _expiry_horizon(run, plan, newest_commit_micros)
    if staged.marks_change or plan.merge_floor is not None or expire is not None:
        # only deletes and revived keys change a tombstone: the others need not be joined
        marking = staged.newest.filter((F.col(OP) == DELETE) | F.col(REVIVES))
        run.merge(tombstone_merge_sql(plan.marks.sql, SOURCE_VIEW, keys, plan.merge_floor,
                                      expire, bounds),
                  marking.select(*(col(k) for k in keys), LSN, CHANGE_INDEX, COMMIT_TS, OP))
    if staged.every is not None:
        history_tables.apply(run, plan.scan, plan.shape, staged.every, plan.after, plan.final,
                             plan.old_key(), plan.toast, plan.replace_tables)
    run.maintenance.register(run.spark, plan.shape.schema, plan.shape.table, plan.silver)
    added, widened = plan.schema.new, plan.schema.widen
    if added or widened:
        log.info("silver %s: added columns %s, widened %s", plan.shape.qualified_name,
                 [f.name for f in added], sorted(widened))
    return Applied(plan.floor, tuple(f.name for f in added), tuple(sorted(widened)))


def _prepare_tables(run: SilverContext, plan: BatchPlan) -> None:
    """Create silver and its tombstones, or evolve them to the batch's schema."""
    if plan.silver_exists:
        evolve(run, plan.silver, plan.target, plan.schema)
    else:
        create_table(run, plan.silver, plan.target, plan.replace_tables)
    keys, types = plan.keys, plan.types
    if plan.marked is not None:
        evolve(run, plan.marks, plan.marked,
               SchemaPlan(widen={k: v for k, v in plan.schema.widen.items() if k in keys}))
    else:
        create_table(run, plan.marks, StructType([StructField(k, types[k], True) for k in keys]
                                                  + list(METADATA_FIELDS)),
                     plan.replace_tables)
    for target in (plan.silver, plan.marks):
        run.maintenance.prepare(run.spark, target, keys)


def _expiry_horizon(run: SilverContext, plan: BatchPlan,
                    newest_commit_micros: int | None) -> int | None:
    """The retention horizon when this run should expire the table's tombstones, else None.

    Expiring makes the tombstone MERGE visit every row of the table (NOT MATCHED BY
    SOURCE), which no key range can narrow: once per EXPIRE_EVERY of bronze time in a
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
    if plan.marks_oldest is None or plan.marks_oldest >= horizon:
        return None
    _expired_at[marks.sql] = newest_commit_micros
    return horizon
