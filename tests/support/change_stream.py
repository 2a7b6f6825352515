"""Test oracle: the change stream read straight from the slot, and docs/architecture.md's reconcile.

Independent of the ingest: changes come from pg_logical_slot_peek_binary_changes and the
pure decoder. Positions are (commit_lsn of the Commit, index of the change inside its
transaction, messages included). `reconcile` is silver's contract in plain Python:
chunk rows whose key changed in the chunk's (low, high) window are dropped (a change
counts as in the window when its transaction committed before the high watermark and
either after the low one or invisibly to the chunk's snapshot), the rest are upserts at
the high watermark's position, the highest position wins per key, and an update's
unchanged TOAST column keeps the previous value (from a dropped chunk row if need be).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

import psycopg

from pipelines.bronze.watermarks import Watermark, parse_watermark
from pipelines.bronze.schema import WATERMARK_PREFIX
from pipelines.ingest.pgoutput import (UNCHANGED_TOAST, Begin, Commit, Delete, Insert,
                                       LogicalMessage, Relation, Update, decode_message)
from pipelines.source.text_format import with_text_format

Position = tuple[int, int]
Key = tuple
UNKNOWN = object()  # a TOAST value nobody supplied: must never reach the final state


@dataclass(frozen=True)
class Event:
    """One change or watermark from the slot, at its position."""

    position: Position
    xid: int
    kind: str  # insert | update | delete | watermark
    table: str | None = None
    columns: tuple[str, ...] = ()
    key_columns: tuple[str, ...] = ()
    new: tuple | None = None  # str | None | UNCHANGED_TOAST per column
    old: tuple | None = None  # the old key (or row) an update or delete sent
    watermark: Watermark | None = None

    def key(self, values: tuple) -> Key:
        return tuple(values[self.columns.index(k)] for k in self.key_columns)

    @property
    def new_key(self) -> Key | None:
        return None if self.new is None else self.key(self.new)

    @property
    def old_key(self) -> Key | None:
        """The key before the change (update with a key change, delete), else None."""
        return None if self.old is None else self.key(self.old)


def peek_events(dsn: str, slot: str = "lakehouse", publication: str = "lakehouse") -> list[Event]:
    """Every committed change and watermark in the slot, without consuming it."""
    with psycopg.connect(with_text_format(dsn), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', %s, 'messages', 'true')",
            (slot, publication)).fetchall()
    relations: dict[int, Relation] = {}
    events: list[Event] = []
    pending: list[Event] = []
    xid = 0
    for (data,) in rows:
        message = decode_message(data)
        if isinstance(message, Begin):
            xid, pending = message.xid, []
        elif isinstance(message, Relation):
            relations[message.relation_id] = message
        elif isinstance(message, (Insert, Update, Delete)):
            relation = relations[message.relation_id]
            shape = dict(table=f"{relation.schema}.{relation.name}",
                         columns=tuple(c.name for c in relation.columns),
                         key_columns=tuple(c.name for c in relation.columns if c.is_key))
            if isinstance(message, Insert):
                pending.append(Event((0, 0), xid, "insert", new=_values(message.new), **shape))
            elif isinstance(message, Update):
                pending.append(Event((0, 0), xid, "update", new=_values(message.new),
                                     old=_values(message.old), **shape))
            else:
                pending.append(Event((0, 0), xid, "delete", old=_values(message.old), **shape))
        elif isinstance(message, LogicalMessage) and message.prefix == WATERMARK_PREFIX:
            pending.append(Event((0, 0), xid, "watermark",
                                 watermark=parse_watermark(message.content)))
        elif isinstance(message, Commit):
            events.extend(replace(e, position=(message.commit_lsn, i))
                          for i, e in enumerate(pending))
            pending = []
    return events


def _values(data: tuple | None) -> tuple | None:
    if data is None:
        return None
    return tuple(None if v is not UNCHANGED_TOAST and not isinstance(v, str) else v
                 for v in data)


@dataclass(frozen=True)
class Window:
    backfill_id: str
    chunk_id: int
    low: Position
    high: Position
    high_xid: int
    low_xid: int
    snapshot: object  # pipelines.bronze.watermarks.Snapshot

    def covers(self, change: Event) -> bool:
        """Does the change make this chunk's row of its key stale (DBLog window)?"""
        return change.position < self.high and (
            change.position > self.low or not self.snapshot.sees(change.xid))


def chunk_windows(events: Iterable[Event], table: str) -> dict[tuple[str, int], Window]:
    """Chunks of `table` whose high watermark is in the stream, with their low one."""
    lows, highs = {}, {}
    for e in events:
        if e.kind == "watermark" and e.watermark.table == table:
            chunk = (e.watermark.backfill_id, e.watermark.chunk_id)
            target = lows if e.watermark.kind == "low" else highs
            assert chunk not in target, f"watermark {e.watermark} emitted twice"
            target[chunk] = e
    return {chunk: Window(*chunk, lows[chunk].position, high.position, high.xid,
                          lows[chunk].xid, high.watermark.snapshot)
            for chunk, high in highs.items()}


def reconcile(events: list[Event], snapshot_rows: list[dict], table: str) -> dict[Key, dict]:
    """The table's rows (key -> {column: text value}) after applying everything."""
    windows = chunk_windows(events, table)
    changes = [e for e in events if e.kind != "watermark" and e.table == table]
    touched: dict[Key, list[Event]] = {}
    for change in changes:
        for key in {change.new_key, change.old_key} - {None}:
            touched.setdefault(key, []).append(change)

    upserts: list[tuple[Position, Key, tuple, tuple]] = []
    dropped: dict[Key, list[tuple[Window, tuple[str, ...], tuple]]] = {}
    columns: tuple[str, ...] = ()
    for row in snapshot_rows:
        window = windows.get((row["backfill_id"], row["chunk_id"]))
        if window is None:  # no high watermark: never applied
            continue
        columns = tuple(row["columns"])
        key = tuple(row["values"][columns.index(k)] for k in row["key_columns"])
        values = tuple(row["values"])
        if any(window.covers(c) for c in touched.get(key, ())):
            dropped.setdefault(key, []).append((window, columns, values))
        else:
            upserts.append((window.high, key, columns, values))

    state: dict[Key, dict | None] = {}
    timeline = [(c.position, "change", c) for c in changes] + \
               [(pos, "chunk", (key, cols, vals)) for pos, key, cols, vals in upserts]
    for _, kind, item in sorted(timeline, key=lambda t: t[0]):
        if kind == "chunk":
            key, cols, vals = item
            state[key] = dict(zip(cols, vals))
            continue
        change: Event = item
        if change.kind == "delete":
            state[change.old_key] = None
            continue
        before_key = change.old_key or change.new_key
        previous = state.get(before_key)
        if change.old_key is not None and change.old_key != change.new_key:
            state[change.old_key] = None
        row = {}
        for column, value in zip(change.columns, change.new):
            if value is UNCHANGED_TOAST:
                value = (previous or {}).get(column, UNKNOWN)
                if value is UNKNOWN:
                    value = _from_dropped(dropped.get(before_key, ()), change, column)
            row[column] = value
        state[change.new_key] = row
    return {key: row for key, row in state.items() if row is not None}


def _from_dropped(candidates, change: Event, column: str):
    """A dropped chunk row holds a TOAST value that no window change touched."""
    for window, columns, values in candidates:
        if window.covers(change):
            return values[columns.index(column)]
    return UNKNOWN
