"""Refresh an incremental report (`incremental by: <column>`) by the groups that changed.

The report's column is a function of one row of one silver table, its *driving* table
(pipelines/gold/grouping.py). A refresh:

1. finds the touched groups: the group of every row of the driving table whose position
   is newer than the last refresh, and, from the report's group index, the group each
   of those rows and each newly deleted key (its tombstone) was in before;
2. runs the report's own SQL over the driving table's rows of those groups only (the
   other tables whole);
3. replaces those groups in the gold table in one Delta commit (replaceWhere), then the
   index's rows of those groups.

The last refresh's record says how far it got (pipelines/gold/state.py) and is written
last: after a crash before it, the next refresh replaces the same groups again, which
changes nothing. It falls back to a full recompute when that is the only safe answer:
no record yet, `--full`, another table the report reads changed, the traced
expression changed, too many groups changed, the index is missing, keyed otherwise or
changed since the record (an interrupted refresh), or the table's row count is not the
last one plus the keys inserted less those deleted (a truncate, a rebuild, tombstones
expired before the refresh). It also rebuilds whole when that is the cheaper way: its
last refresh by groups took longer than its last whole build (a small table, or an
engine where each Spark job costs a fixed toll).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.catalog import TableRef, delta_path, read_table, staged
from pipelines.errors import ConfigError
from pipelines.gold.build import ReportRun, build_report, materialize_report, report_columns
from pipelines.gold.conform import ROWS, conform_to_schema, validated_aggregates
from pipelines.gold.grouping import GROUP_TYPES, Grouping
from pipelines.gold.silver_facts import newest_position, row_count
from pipelines.gold.state import (FULL, INCREMENTAL, Refresh, group_index, group_staging,
                                  read_refreshes, record_refresh)
from pipelines.names import quote, spark_literal
from pipelines.position_columns import is_after_position
from pipelines.positions import START, Position
from pipelines.silver.events import CHANGE_INDEX, LSN, tombstone_keys
from pipelines.silver.maintenance import DELETION_VECTORS
from pipelines.silver.key_ranges import key_range

if TYPE_CHECKING:
    from pipelines.gold.definitions import Report
    from pipelines.gold.io import GoldIO

log = logging.getLogger(__name__)

GROUP = "_group"  # the index column of a key's group
_STRAY = "_stray"  # the first row a refresh made outside the groups it touched
MAX_GROUPS = 10_000  # more touched groups than this: a full recompute is as cheap


@dataclass(frozen=True)
class Driving:
    """The driving silver table as this refresh reads it."""

    table: TableRef
    marks: TableRef | None  # its tombstones
    rows: DataFrame
    tombstones: DataFrame | None
    keys: tuple[str, ...]  # its primary key (the tombstone table's key columns)

    def newest_after(self, spark: SparkSession, position: Position) -> Position | None:
        """The newest position of a row or a deleted key after `position` (None when
        there is none), in the tables as they are now: silver applies changes in
        position order, so any change to the table is after the last one seen."""
        return newest_position(spark, [self.table, self.marks], position)


def refresh_incremental(spark: SparkSession, report: "Report",
                        views: dict[tuple[str, str], str], io: "GoldIO", *,
                        full: bool = False) -> ReportRun:
    """Refresh `report` by its touched groups, or whole when that is the only safe way
    or the cheaper one; record what was done and how long each way took."""
    started = time.monotonic()
    grouping = report.incremental
    assert grouping is not None
    driving = _driving(spark, io, grouping)
    refreshes = read_refreshes(io.lake)
    inputs = _inputs(spark, io, report, refreshes)
    last = refreshes.get(report.name)
    reason = _why_full(last, grouping, driving, inputs, full, _index_state(io, report.name))
    position = None  # the driving table's newest, once looked up
    if reason is None and (faster := _whole_is_faster(last)):
        position = driving.newest_after(spark, last.position)
        # nothing new: the refresh by groups writes nothing, cheaper still
        reason = faster if position is not None else None
    whole_seconds, groups_seconds = ((last.whole_seconds, last.groups_seconds) if last
                                     else (None, None))
    if reason is None:
        began = time.monotonic()
        outcome = _by_groups(spark, report, views, io, driving, last)
        if isinstance(outcome, str):
            reason = outcome
        elif outcome.groups:  # a refresh with nothing to replace times no groups
            groups_seconds = time.monotonic() - began
    if reason is not None:
        position = position or driving.newest_after(spark, START)  # before the build reads it
        began = time.monotonic()
        run = materialize_report(spark, report, views, io, full=full)
        table_rows = _rebuild_index(spark, report, io, driving)
        rows, groups = run.rows, None
        whole_seconds = time.monotonic() - began
        log.info("gold %s: built whole (%s)", report.name, reason)
    else:
        rows, groups, table_rows, position = (outcome.rows, outcome.groups,
                                              outcome.table_rows, outcome.position)
    moved = driving.newest_after(spark, position or START) is not None
    seconds = time.monotonic() - started
    index = _index_state(io, report.name)
    record_refresh(io.lake, Refresh(
        report.name, datetime.now(timezone.utc), FULL if reason else INCREMENTAL, rows,
        seconds, groups, reason, grouping.expression, *(position or (None, None)),
        table_rows, inputs, needs_full=moved, index_version=index.version,
        whole_seconds=whole_seconds, groups_seconds=groups_seconds))
    if moved:
        log.warning("gold %s: silver %s changed during the refresh; the next refresh "
                    "rebuilds the report whole", report.name, grouping.table)
    return ReportRun(report.name, io.report_location(report.name), rows, seconds,
                     groups=groups)


def _whole_is_faster(last: Refresh) -> str | None:
    """Why a whole rebuild is the cheaper refresh: the last refresh by groups took longer
    than the last whole build (the report and its index; the work every refresh does is
    timed in neither). None when groups are cheaper or no refresh by groups was timed
    yet. A table that grows makes its whole builds slower, until groups are cheaper
    again."""
    whole, groups = last.whole_seconds, last.groups_seconds
    if whole is None or groups is None or groups <= whole:
        return None
    return f"a whole rebuild is faster here: {whole:.2f} s against {groups:.2f} s by groups"


def _driving(spark: SparkSession, io: "GoldIO", grouping: Grouping) -> Driving:
    silver = io.silver_table(grouping.table)
    marks_ref = io.tombstones(grouping.table)
    rows = read_table(spark, silver)
    marks = None if marks_ref is None else read_table(spark, marks_ref)
    keys = () if marks is None else tombstone_keys(marks.columns)
    return Driving(silver, marks_ref, rows, marks, keys)


def _inputs(spark: SparkSession, io: "GoldIO", report: "Report",
            refreshes: dict[str, Refresh]) -> str:
    """What the report's other tables look like now, as JSON: a silver table's row count
    and newest positions, a report's last refresh. A change means a full recompute."""
    grouping = report.incremental
    state = {}
    for table in {t.parts: t for t in report.tables}.values():
        if table.kind == "silver" and table.name == grouping.table:
            continue
        if table.kind == "gold":
            last = refreshes.get(table.name)
            state[str(table)] = last.refreshed_at.isoformat() if last else None
            continue
        rows = io.silver_table(table.name)
        newest = newest_position(spark, [rows, io.tombstones(table.name)])
        state[str(table)] = [row_count(spark, rows), list(newest) if newest else None]
    return json.dumps(state, sort_keys=True)


@dataclass(frozen=True)
class IndexState:
    """The report's group index as the lake has it (delta-rs: no Spark job)."""

    columns: tuple[str, ...] = ()  # none: the index or the report's table is missing
    version: int | None = None


def _index_state(io: "GoldIO", report: str) -> IndexState:
    where = group_index(io.lake, report)
    if not (where.exists() and io.report_exists(report)):
        return IndexState()
    table = where.open()
    return IndexState(tuple(f.name for f in table.schema().fields), table.version())


def _why_full(last: Refresh | None, grouping: Grouping, driving: Driving, inputs: str,
              full: bool, index: IndexState) -> str | None:
    """Why this refresh must recompute the report whole; None when groups will do."""
    if full:
        return "--full"
    if not driving.keys:
        return f"silver {grouping.table} has no tombstone table yet, so no key"
    if last is None or last.grouping is None:
        return "first build"
    if not index.columns:
        return "its table or its group index is missing"
    if index.columns != (*driving.keys, GROUP):
        return f"the key of silver {grouping.table} changed"
    if index.version != last.index_version:
        return "its group index changed after the last refresh (one was interrupted)"
    if last.needs_full:
        return f"silver {grouping.table} changed during the last refresh"
    if last.grouping != grouping.expression:
        return "its incremental by column is computed differently"
    if last.inputs != inputs:
        return "another table it reads changed"
    return None


@dataclass(frozen=True)
class ByGroups:
    """What an incremental refresh did."""

    rows: int  # written
    groups: int  # replaced
    table_rows: int  # of the driving table, each a key of the index
    position: Position | None  # the newest the refresh saw


def _by_groups(spark: SparkSession, report: "Report", views: dict[tuple[str, str], str],
               io: "GoldIO", driving: Driving, last: Refresh) -> ByGroups | str:
    """Replace the touched groups, or say why they cannot be."""
    grouping = report.incremental
    group = _group_sql(io.read_report(spark, report.name), report)
    changes = _changes(spark, io, report.name, driving, group, last.position)
    if len(changes.touched) > MAX_GROUPS:
        return f"more than {MAX_GROUPS:,} groups changed"
    rows = 0
    if changes.touched:
        rows = _replace_touched(spark, report, views, io, driving, group, changes)
    table_rows = row_count(spark, driving.table)
    expected = last.table_rows + changes.inserted - changes.deleted
    if table_rows != expected:
        return (f"silver {grouping.table} has {table_rows:,} rows where its changes since "
                f"the last refresh leave {expected:,} (a truncate, a rebuild, or tombstones "
                "expired before this refresh)")
    log.info("gold %s: %d group(s) replaced, %d rows", report.name, len(changes.touched), rows)
    return ByGroups(rows, len(changes.touched), table_rows,
                    max(filter(None, [changes.newest, last.position])))


@dataclass(frozen=True)
class Changes:
    """The driving table's changes since a position, as one refresh sees them."""

    touched: list  # the groups to replace: changed rows' new groups, their keys' old ones
    changed: DataFrame  # the keys of the changed live rows
    inserted: int  # keys the index does not have yet
    deleted: int  # deleted keys the index has
    newest: Position | None


def _changes(spark: SparkSession, io: "GoldIO", report: str, driving: Driving, group: str,
             seen: Position) -> Changes:
    """One pass over the new rows, the new tombstones and the index's rows of their keys.
    The tombstones are a log of deletes: a key deleted since may be live again (its row
    is newer than its tombstone), or deleted twice; each key counts once."""
    keys = list(driving.keys)

    def after(df: DataFrame) -> DataFrame:  # the `>=` lets the engines skip old files
        return df.filter(F.col(LSN) >= seen[0]).filter(
            is_after_position(F.col(LSN), F.col(CHANGE_INDEX), seen))

    changed = after(driving.rows).select(*keys, F.expr(group).alias(GROUP), LSN,
                                         CHANGE_INDEX, F.lit(True).alias("_live"))
    deleted = after(driving.tombstones).groupBy(*keys).agg(
        F.max(F.struct(LSN, CHANGE_INDEX)).alias("_at")).join(
        changed.select(*keys), keys, "left_anti").select(
        *keys, F.lit(None).cast(changed.schema[GROUP].dataType).alias(GROUP),
        F.col(f"_at.{LSN}").alias(LSN), F.col(f"_at.{CHANGE_INDEX}").alias(CHANGE_INDEX),
        F.lit(False).alias("_live"))
    events = changed.unionByName(deleted)
    index = read_table(spark, TableRef(path=group_index(io.lake, report)))
    # the index's rows of those keys (a broadcast join: the changes are the small side)
    known = index.join(F.broadcast(events.select(*keys, "_live")), keys)
    tagged = events.select(F.lit(False).alias("_known"), "_live", GROUP, LSN, CHANGE_INDEX) \
        .unionByName(known.select(F.lit(True).alias("_known"), "_live", GROUP,
                                  F.lit(None).cast("bigint").alias(LSN),
                                  F.lit(None).cast("bigint").alias(CHANGE_INDEX)))
    new, was = ~F.col("_known"), F.col("_known")
    live = F.col("_live")
    found = tagged.agg(  # one Spark job
        F.collect_set(F.when(new & live, F.struct(F.col(GROUP)))).alias("new"),
        F.collect_set(F.when(was, F.struct(F.col(GROUP)))).alias("old"),
        F.count(F.when(new & live, 1)).alias("live"),
        F.count(F.when(was & live, 1)).alias("live_known"),
        F.count(F.when(was & ~live, 1)).alias("deleted"),
        F.max(F.when(new, F.struct(F.col(LSN), F.col(CHANGE_INDEX)))).alias("newest"),
    ).first()
    touched = list(dict.fromkeys(g[0] for g in [*found.new, *found.old]))
    newest = None if found.newest is None else (found.newest[0], found.newest[1])
    return Changes(touched, changed.select(*keys), found.live - found.live_known,
                   found.deleted, newest)


def _replace_touched(spark: SparkSession, report: "Report", views: dict[tuple[str, str], str],
                     io: "GoldIO", driving: Driving, group: str, changes: Changes) -> int:
    """The report over the driving rows of the touched groups, in place of those groups
    in its table; then the index's rows of those groups anew (a key that left a group
    leaves it, one that joined is there, a deleted key is gone). The rows written."""
    grouping = report.incremental
    view = views[next(t.parts for t in report.tables
                      if t.kind == "silver" and t.name == grouping.table)]
    touched = changes.touched
    # read once: the report's checks, its write and the index's all read these rows
    rows_of_groups = staged(spark, _rows_of_groups(spark, io, report.name, driving, group,
                                                   changes),
                            group_staging(io.lake, report.name))
    rows_of_groups.createOrReplaceTempView(view)
    try:  # every action on the report: Spark Connect resolves the view at each one
        rows = _replace_groups(spark, report, views, io, touched)
    finally:  # a full build after this one reads the whole table again
        driving.rows.createOrReplaceTempView(view)
    # Two commits, each cheap whatever the index's size (the DELETE marks rows in deletion
    # vectors; one rewrite of the index's files by replaceWhere costs as much as a full
    # build): an interruption between them is seen by the index's version, not recorded.
    index = group_index(io.lake, report.name)
    spark.sql(f"DELETE FROM {delta_path(index)} WHERE {in_groups(GROUP, touched)}").collect()
    (rows_of_groups.select(*driving.keys, F.expr(group).alias(GROUP)).write.format("delta")
     .mode("append").save(index.uri))
    return rows


def _rows_of_groups(spark: SparkSession, io: "GoldIO", report: str, driving: Driving,
                    group: str, changes: Changes) -> DataFrame:
    """The driving rows of the touched groups. Their keys are the index's keys of those
    groups and the changed rows' keys; the ranges those span (as silver's MERGE uses
    them) let the engines skip the files and row groups of other keys, which the group
    filter alone cannot."""
    index = read_table(spark, TableRef(path=group_index(io.lake, report)))
    keys = (index.filter(in_groups(GROUP, changes.touched)).select(*driving.keys)
            .unionByName(changes.changed))
    rows = driving.rows
    bounds = key_range(keys, driving.keys)
    if bounds is not None:
        rows = rows.alias("t").filter(F.expr(bounds))
    return rows.filter(in_groups(group, changes.touched))


def _replace_groups(spark: SparkSession, report: "Report", views: dict[tuple[str, str], str],
                    io: "GoldIO", touched: list) -> int:
    """Run the report over the touched groups' rows, check it, replace those groups in
    its table: the rows written."""
    column = report.incremental.column
    df = build_report(spark, report, views)
    columns = report_columns(spark, report, df, io, False)
    # the check that every row is of a touched group rides in the values' check: one
    # action over the report's rows, then the write
    declared = next(type_ for name, type_ in columns if name.lower() == column.lower())
    outside = F.expr(f"NOT {in_groups(f'try_cast({quote(column)} AS {declared})', touched)}")
    stray = F.first(F.when(outside, F.struct(F.col(column).try_cast(declared).alias("group"))),
                    ignorenulls=True)
    checked = validated_aggregates(df, columns, str(report.path), {_STRAY: stray})
    if checked[_STRAY] is not None:
        raise ConfigError(
            f"gold report {report.path}: incremental by {column}: the query gave a row of "
            f"group {checked[_STRAY]['group']!r} from rows of other groups; each group's "
            "rows must come from the silver rows of that group (remove the header line, "
            "or group by a column computed from each row)")
    io.replace_groups(conform_to_schema(df, columns), report.name,
                      in_groups(quote(column), touched))
    return checked[ROWS]


def _group_type(gold: DataFrame, grouping: Grouping, report: "Report") -> str:
    """The report column's type, if its values can name a group in SQL text."""
    type_ = next((f.dataType.simpleString() for f in gold.schema.fields
                  if f.name.lower() == grouping.column.lower()), None)
    if type_ not in GROUP_TYPES:
        raise ConfigError(f"gold report {report.path}: incremental by {grouping.column}: "
                          f"its type is {type_}; a group column is one of "
                          f"{', '.join(GROUP_TYPES)}")
    return type_


def in_groups(column: str, values: list) -> str:
    """SQL: `column` (SQL text) is one of `values`, NULL included when it is one of them.
    It is never NULL itself: Sail's replaceWhere replaces the rows its condition leaves
    NULL (a NULL group's, when the refresh did not touch it), Delta's keeps them."""
    literals = [spark_literal(v) for v in values if v is not None]
    listed = f"{column} IN ({', '.join(literals)})" if literals else "FALSE"
    if None in values:
        return f"({listed} OR {column} IS NULL)"
    return f"({column} IS NOT NULL AND {listed})"


def _group_sql(gold: DataFrame, report: "Report") -> str:
    """The group of a driving row, in SQL, typed as the report's column."""
    grouping = report.incremental
    return f"CAST(({grouping.expression}) AS {_group_type(gold, grouping, report)})"


def _rebuild_index(spark: SparkSession, report: "Report", io: "GoldIO",
                   driving: Driving) -> int | None:
    """After a full build: every key's group, written anew; and the check that the
    traced expression gives the report's own values (else incremental refreshes would
    replace the wrong groups). The table's row count, or None without a key."""
    if not driving.keys:
        return None
    grouping = report.incremental
    gold = io.read_report(spark, report.name)
    where = group_index(io.lake, report.name)
    (driving.rows.select(*driving.keys, F.expr(_group_sql(gold, report)).alias(GROUP))
     .write.format("delta").mode("overwrite").option("overwriteSchema", "true")
     .option(DELETION_VECTORS, "true").save(where.uri))
    index = read_table(spark, TableRef(path=where))
    groups = index.select(F.col(GROUP)).distinct()
    unknown = (gold.select(F.col(grouping.column).alias("_value")).distinct()
               .join(groups, F.col("_value").eqNullSafe(groups[GROUP]), "left_anti"))
    stray = unknown.limit(1).collect()
    if stray:
        raise ConfigError(
            f"gold report {report.path}: incremental by {grouping.column}: the report has "
            f"group {stray[0][0]!r}, which no row of silver {grouping.table} gives as "
            f"{grouping.expression}; the report was written whole, but cannot be refreshed "
            "by groups: remove the header line or group by a column computed from each row")
    return row_count(spark, TableRef(path=where))
