"""History tables: every version of every key of a silver table (SCD type 2).

One row per version of a key: the typed source columns, where the version starts and
ends in the change stream and in time, whether it is current, and the change that
opened it. The rules, applied to a key's events in position order:

- a change (insert or update) opens a new version when the key has no open version,
  or when a tracked column (`silver.history_columns`, default: every column) differs
  from the open one; otherwise it updates the open version in place;
- a backfill row opens a version only when the key has none open: it never splits one
  (it holds what the stream already gave, or a TOAST value the stream did not send);
- a delete (and the old key of a key change) closes the open version;
- a truncate, or the end of a resync, closes every open version last written at or
  below its floor (scan.Closing), at its own position.

A batch reads, per key it touches, the version open at the batch's start (its *base*)
and writes the versions the batch touched, matched on (key, _valid_from). Everything is
computed from the base and the batch's events, so a re-run of the same batch writes
the same rows, and a MERGE that finds them equal changes nothing.

Positions are their sortable number as DECIMAL(38,0) (pipelines.positions).
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType, LongType, StringType, StructField, StructType, TimestampType)

from pipelines.names import quote
from pipelines.position_columns import (
    POSITION_TYPE, is_before_position, number_column, number_literal, sql_before, sql_number)
from pipelines.positions import Position
from pipelines.silver.events import (
    CHANGE, CHANGE_INDEX, COMMIT_TS, DELETE, LSN, OLD_KEY, OP, SNAPSHOT, UNCHANGED, UPSERT,
    col)
from pipelines.silver.merge import update_where_sql
from pipelines.silver.scan import Closing

VALID_FROM, VALID_TO = "_valid_from", "_valid_to"
VALID_FROM_TS, VALID_TO_TS = "_valid_from_ts", "_valid_to_ts"
IS_CURRENT, HISTORY_OP = "_is_current", "_op"
HISTORY_FIELDS = (
    StructField(VALID_FROM, POSITION_TYPE), StructField(VALID_TO, POSITION_TYPE),
    StructField(VALID_FROM_TS, TimestampType()), StructField(VALID_TO_TS, TimestampType()),
    StructField(IS_CURRENT, BooleanType()), StructField(HISTORY_OP, StringType()),
    StructField(LSN, LongType()), StructField(CHANGE_INDEX, LongType()),
    StructField(COMMIT_TS, TimestampType()))
HISTORY_COLUMNS = tuple(f.name for f in HISTORY_FIELDS)

_BASE = "base"  # the kind of a base row in the combined stream
_BUCKETS = 64  # window partitions of a batch's events (_key_order)
# history_versions' working columns: a row's op (upsert/delete), kind (its change, or
# _BASE), position, and the start it gives a version it opens
_OP, _KIND, _POS = "_cdc_h_op", "_cdc_h_kind", "_cdc_h_pos"
_FROM, _FROM_TS, _OPENED_BY = "_cdc_h_from", "_cdc_h_from_ts", "_cdc_h_opened_by"
_CLOSED, _CLOSED_TS = "_cdc_h_closed", "_cdc_h_closed_ts"  # the closing that closes it
_PREV, _NEXT = "_cdc_h_prev", "_cdc_h_next"
_HAS_PREV, _OPENS = "_cdc_h_has_prev", "_cdc_h_opens"
_HAS_NEXT, _NEXT_OP, _NEXT_OPENS, _NEXT_POS, _NEXT_TS = (
    "_cdc_h_has_next", "_cdc_h_next_op", "_cdc_h_next_opens", "_cdc_h_next_pos",
    "_cdc_h_next_ts")
_STARTS, _LAST, _START = "_cdc_h_starts", "_cdc_h_last", "_cdc_h_start"


def history_schema(silver_fields: Sequence[StructField]) -> StructType:
    """A history table's schema: silver's source columns, then history's own."""
    return StructType([f for f in silver_fields if f.name not in (LSN, CHANGE_INDEX, COMMIT_TS)]
                      + list(HISTORY_FIELDS))


def open_at(position: Position) -> str:
    """SQL: the versions open at `position` (the table as it was there)."""
    at = sql_number(position)
    return f"{VALID_FROM} <= {at} AND ({VALID_TO} IS NULL OR {VALID_TO} > {at})"


def fill_from_base(events: DataFrame, base: DataFrame, keys: Sequence[str],
                   columns: Sequence[str], old_key: Sequence[Column] = ()) -> DataFrame:
    """Unchanged TOAST values the batch could not resolve, from the key's base version
    (a moved row's: from its old key's, `old_key` the typed old key values)."""
    if not columns:
        return events
    found = base.select(*(col(k).alias(f"_cdc_bk_{i}") for i, k in enumerate(keys)),
                        *(col(c).alias(f"_cdc_bv_{j}") for j, c in enumerate(columns)))
    own = [col(k) for k in keys]
    lookup = [F.when(F.col(OLD_KEY).isNotNull(), moved).otherwise(key)
              for moved, key in zip(old_key, own)] if old_key else own
    on = None
    for i, value in enumerate(lookup):
        match = value == F.col(f"_cdc_bk_{i}")
        on = match if on is None else on & match
    unchanged = {c: F.array_contains(F.col(UNCHANGED), F.lit(c)) & F.col("_cdc_bk_0").isNotNull()
                 for c in columns}
    updates = {c: F.when(unchanged[c], F.col(f"_cdc_bv_{j}")).otherwise(col(c))
               for j, c in enumerate(columns)}
    return (events.join(found, on, "left")
            .select(*(updates[n].alias(n) if n in updates else col(n) for n in events.columns)))


def history_versions(events: DataFrame, base: DataFrame, keys: Sequence[str],
                     columns: Sequence[str], tracked: Sequence[str],
                     closings: Sequence[Closing] = ()) -> DataFrame:
    """The versions one batch touches: typed, TOAST-complete events in, history rows out.

    events: keys, `columns` (the value columns), _lsn, _change_index, _commit_ts,
    _cdc_op (upsert/delete) and _cdc_change (insert, update, delete, snapshot);
    base: each touched key's version open at the batch's start, as history rows;
    tracked: the value columns whose change opens a version;
    closings: the batch's truncates and resync ends.
    Returns history rows (keys, `columns`, HISTORY_COLUMNS), one per version touched.

    Each row looks at its neighbours in (key, position) order: whether it opens a
    version (the row before), whether it is its version's last (the row after). A
    version is then its first row's start and its last row's values.
    """
    return (combined_stream(events, base, keys, columns)
            .transform(with_closings, closings)
            .transform(with_openings, keys, tracked)
            .transform(with_next, keys)
            .transform(version_edges, keys, columns)
            .transform(versions_from_edges, keys, columns))


def combined_stream(events: DataFrame, base: DataFrame, keys: Sequence[str],
                    columns: Sequence[str]) -> DataFrame:
    """The batch's events and its base versions as one stream, so each key's rows can be
    read in position order; each row with its position and the start it gives a version
    it opens (a base row: its version's own)."""
    rows = [*(col(k) for k in keys), *(col(c) for c in columns), LSN, CHANGE_INDEX, COMMIT_TS]
    position = number_column(F.col(LSN), F.col(CHANGE_INDEX))
    changes = events.select(
        *rows, F.col(OP).alias(_OP), F.col(CHANGE).alias(_KIND), position.alias(_POS),
        position.alias(_FROM), F.col(COMMIT_TS).alias(_FROM_TS),
        F.col(CHANGE).alias(_OPENED_BY))
    return changes.unionByName(base.select(
        *rows, F.lit(UPSERT).alias(_OP), F.lit(_BASE).alias(_KIND), position.alias(_POS),
        F.col(VALID_FROM).alias(_FROM), F.col(VALID_FROM_TS).alias(_FROM_TS),
        F.col(HISTORY_OP).alias(_OPENED_BY)))


def with_closings(stream: DataFrame, closings: Sequence[Closing]) -> DataFrame:
    """Each row with the first closing that closes it, if one does: a version last
    written there ends at that closing unless the stream moves on first."""
    closed, closed_ts = _closed_at(closings, F.col(LSN), F.col(CHANGE_INDEX))
    return stream.select("*", closed.alias(_CLOSED), closed_ts.alias(_CLOSED_TS))


def _closed_at(closings: Sequence[Closing], lsn: Column, index: Column) -> tuple[Column, Column]:
    """The position and time of the first closing after (lsn, index) that closes a
    version last written there (null, null: none does)."""
    found = None
    for closing in sorted(closings, key=lambda c: c.at):
        hit = (is_before_position(lsn, index, closing.at)
               & is_before_position(lsn, index, closing.floor, inclusive=True))
        at = F.struct(number_literal(closing.at).alias("p"),
                      F.lit(closing.at_micros).cast(LongType()).alias("t"))
        found = F.when(hit, at) if found is None else found.when(hit, at)
    if found is None:
        return F.lit(None).cast(POSITION_TYPE), F.lit(None).cast(TimestampType())
    return found.getField("p"), F.timestamp_micros(found.getField("t"))


def with_openings(stream: DataFrame, keys: Sequence[str], tracked: Sequence[str]
                  ) -> DataFrame:
    """Each row with whether the row before it in (key, position) order is of its key,
    and whether it opens a version (the rules, module docstring): what they need of the
    row before, in one window."""
    seen = [*keys, *tracked, _OP, _CLOSED]
    prev = F.col(_PREV)

    def field(name: str) -> Column:
        return prev.getField(f"f{seen.index(name)}")

    same_key = prev.isNotNull()
    for k in keys:
        same_key = same_key & (field(k) == col(k))
    same_key = F.coalesce(same_key, F.lit(False))
    same_tracked = F.lit(True)
    for c in tracked:
        same_tracked = same_tracked & field(c).eqNullSafe(col(c))
    continues = same_key & _alive_at(field(_OP), field(_CLOSED), F.col(_POS))
    kind = F.col(_KIND)
    opens = (kind != _BASE) & (F.col(_OP) == UPSERT) & _opens(continues, kind, same_tracked)
    near = F.struct(*(col(n).alias(f"f{i}") for i, n in enumerate(seen)))
    return (stream.select("*", F.lag(near).over(_key_order(keys)).alias(_PREV))
            .select("*", same_key.alias(_HAS_PREV), opens.alias(_OPENS)).drop(_PREV))


def with_next(stream: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Each row with what the rules need of the row after it of its key (null where none
    is): whether one is, its op, whether it opens a version, its position and commit
    time. The row after is of the same key exactly where its own row before is this one.
    Engines pay per value a window carries: this one carries five, not the row's
    tracked values, which with_openings compared already."""
    seen = [_HAS_PREV, _OP, _OPENS, _POS, COMMIT_TS]
    near = F.struct(*(col(n).alias(f"f{i}") for i, n in enumerate(seen)))
    stream = stream.select("*", F.lead(near).over(_key_order(keys)).alias(_NEXT))
    has_next = F.coalesce(F.col(_NEXT).getField("f0"), F.lit(False))

    def of(name: str) -> Column:
        return F.when(has_next, F.col(_NEXT).getField(f"f{seen.index(name)}"))

    return stream.select(
        "*", has_next.alias(_HAS_NEXT), of(_OP).alias(_NEXT_OP),
        of(_OPENS).alias(_NEXT_OPENS), of(_POS).alias(_NEXT_POS),
        of(COMMIT_TS).alias(_NEXT_TS)).drop(_NEXT)


def version_edges(stream: DataFrame, keys: Sequence[str], columns: Sequence[str]
                  ) -> DataFrame:
    """The rows that open or last write a version (the rules, module docstring), each
    with where its version would end if it is the last: only they make a version."""
    upsert, kind = F.col(_OP) == UPSERT, F.col(_KIND)
    has_next, next_position = F.col(_HAS_NEXT), F.col(_NEXT_POS)
    closed_first = F.col(_CLOSED).isNotNull() & (~has_next | (F.col(_CLOSED) < next_position))
    # A version's last row: nothing of its key follows, or a closing comes first, or
    # the next event deletes the key or opens another version.
    last = upsert & (~has_next | closed_first | (F.col(_NEXT_OP) == DELETE)
                     | F.col(_NEXT_OPENS))
    starts = F.col(_OPENS) | (kind == _BASE)
    return stream.filter(starts | last).select(
        *(col(k) for k in keys), *(col(c) for c in columns), LSN, CHANGE_INDEX, COMMIT_TS,
        starts.alias(_STARTS), last.alias(_LAST), _FROM, _FROM_TS, _OPENED_BY,
        F.when(closed_first, F.col(_CLOSED)).when(has_next, next_position).alias(VALID_TO),
        F.when(closed_first, F.col(_CLOSED_TS)).when(has_next, F.col(_NEXT_TS))
        .alias(VALID_TO_TS))


def versions_from_edges(edges: DataFrame, keys: Sequence[str], columns: Sequence[str]
                        ) -> DataFrame:
    """One history row per version: its last row's values from the start of its first
    (among first and last rows, a last row that did not open its version follows the row
    that did)."""
    begin = F.struct(F.col(_FROM).alias("p"), F.col(_FROM_TS).alias("t"),
                     F.col(_OPENED_BY).alias("o"))
    start = F.when(F.col(_STARTS), begin).otherwise(F.lag(begin).over(_key_order(keys)))
    return edges.select("*", start.alias(_START)).filter(F.col(_LAST)).select(
        *(col(k) for k in keys), *(col(c) for c in columns),
        F.col(f"{_START}.p").alias(VALID_FROM), VALID_TO,
        F.col(f"{_START}.t").alias(VALID_FROM_TS), VALID_TO_TS,
        F.col(VALID_TO).isNull().alias(IS_CURRENT), F.col(f"{_START}.o").alias(HISTORY_OP),
        LSN, CHANGE_INDEX, COMMIT_TS)


def _key_order(keys: Sequence[str]) -> WindowSpec:
    """(key, position) order, partitioned by buckets of keys, not by key: a batch holds
    one or two events per key, and engines pay per window partition (Sail several
    times the whole step)."""
    bucket = F.pmod(F.xxhash64(*(col(k) for k in keys)), F.lit(_BUCKETS))
    return Window.partitionBy(bucket).orderBy(*(col(k) for k in keys), LSN, CHANGE_INDEX)


def _alive_at(op: Column, closed: Column, position: Column) -> Column:
    """An upsert (op) still open at `position` (a sortable number) unless a closing
    came first."""
    return (op == UPSERT) & (closed.isNull() | (closed > position))


def _opens(continues: Column, kind: Column, same: Column) -> Column:
    """An upsert opens a version unless it continues an open one: a change that leaves
    the tracked values `same`, or a backfill row (which never splits one)."""
    return ~continues | ((kind != SNAPSHOT) & ~same)


def history_merge_sql(target: str, source: str, keys: Sequence[str],
                      columns: Sequence[str], key_range: str | None = None,
                      insert: bool = True) -> str:
    """MERGE of a batch's versions (`columns`: every column of the history table) on
    (key, _valid_from): a version the batch changed is updated, a new one inserted
    (unless not `insert`), and one already as the batch would leave it (a re-run) is
    left alone."""
    on = " AND ".join([f"t.{quote(k)} = s.{quote(k)}" for k in keys]
                      + [f"t.{VALID_FROM} = s.{VALID_FROM}"] + ([key_range] if key_range else []))
    differs = (f"(t.{LSN} <> s.{LSN} OR t.{CHANGE_INDEX} <> s.{CHANGE_INDEX} "
               f"OR NOT (t.{VALID_TO} <=> s.{VALID_TO}))")
    updates = ", ".join(f"{quote(n)} = s.{quote(n)}" for n in columns if n not in keys
                        and n != VALID_FROM)
    names = ", ".join(quote(n) for n in columns)
    values = ", ".join(f"s.{quote(n)}" for n in columns)
    sql = (f"MERGE INTO {target} t USING {source} s ON {on}\n"
           f"WHEN MATCHED AND {differs} THEN UPDATE SET {updates}")
    if insert:
        sql += f"\nWHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
    return sql


def closings_sql(target: str, closings: Sequence[Closing], source: str | None = None) -> str:
    """Close the current versions a batch's truncates and resync ends close, at the
    first of them that reaches each (merge.update_where_sql: `source` for a MERGE)."""
    hits, positions, times = [], [], []
    for closing in sorted(closings, key=lambda c: c.at):
        hit = f"({_sql_before(closing.at)} AND {_sql_before(closing.floor, inclusive=True)})"
        hits.append(hit)
        positions.append(f"WHEN {hit} THEN {sql_number(closing.at)}")
        times.append(f"WHEN {hit} THEN " + ("NULL" if closing.at_micros is None
                                            else f"timestamp_micros({closing.at_micros})"))
    return update_where_sql(
        target, f"{VALID_TO} = CASE {' '.join(positions)} END, "
        f"{VALID_TO_TS} = CASE {' '.join(times)} END, {IS_CURRENT} = false",
        f"t.{IS_CURRENT} AND ({' OR '.join(hits)})", source)


def _sql_before(position: Position, inclusive: bool = False) -> str:
    return sql_before(f"t.{LSN}", f"t.{CHANGE_INDEX}", position, inclusive)


def as_of(history: DataFrame, at: "datetime | Position | int") -> DataFrame:
    """The table as it was at `at`, from its history table: a commit time (every
    change committed at or before it), or a position ((commit LSN, change index), or
    history's number). The source columns only, one row per key."""
    if isinstance(at, datetime):
        when = F.lit(at).cast(TimestampType())
        open_then = (F.col(VALID_FROM_TS) <= when) & (
            F.col(VALID_TO).isNull() | (F.col(VALID_TO_TS) > when))
    else:
        number = number_literal(at)
        open_then = (F.col(VALID_FROM) <= number) & (
            F.col(VALID_TO).isNull() | (F.col(VALID_TO) > number))
    return history.filter(open_then).drop(*HISTORY_COLUMNS)
