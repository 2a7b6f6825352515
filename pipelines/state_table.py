"""The pipeline's small state tables (`_state/...`: silver's progress, backfills, gold's
refreshes, slot generations): read whole, upserted by key or appended to, with delta-rs
on every engine (no Spark job).

A write is one commit. Several processes may write a table at once (backfills of
different tables, reports refreshed side by side): a commit that loses the race is tried
again on the table's new version, a bounded number of times.
"""

from __future__ import annotations

import threading
import time
from dataclasses import MISSING, Field, fields
from typing import TYPE_CHECKING, Any, Iterable, TypeVar

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from pipelines.lake import Where, location, read_delta, with_log_retention
from pipelines.names import standard_string

if TYPE_CHECKING:
    from deltalake import DeltaTable

R = TypeVar("R")
TIMESTAMP = pa.timestamp("us", tz="UTC")  # Delta's `timestamp` (UTC-adjusted)
ATTEMPTS = 20  # commits tried before a lost race fails the write


class StateTable:
    """One state table: where it is, its columns, and the column whose value identifies
    a row (for upserts). Writes of one instance are serialized (threads share it)."""

    def __init__(self, where: Where, schema: pa.Schema, key: str | None = None) -> None:
        self.location = location(where)
        self.schema = schema
        self.key = key
        self._lock = threading.Lock()
        self._table: DeltaTable | None = None  # kept open: reloading the log costs more

    def rows(self) -> list[dict[str, Any]]:
        """Every row as a dict; none before the table's first write."""
        try:
            return read_delta(self.location).to_pylist()
        except TableNotFoundError:
            return []

    def records(self, record: type[R]) -> list[R]:
        """Every row as a `record` (a dataclass): the columns it has a field for, lists
        as tuples, a null where the field has a default as that default (a column added
        after the row was written)."""
        known = {f.name: f for f in fields(record)}
        return [record(**{name: _value(known[name], value)
                          for name, value in row.items() if name in known})
                for row in self.rows()]

    def upsert(self, rows: Iterable[Any]) -> None:
        """Replace the rows with these keys and add the others (dicts or dataclasses)."""
        table = self._arrow(rows)
        keys = sorted(set(table.column(self.key).to_pylist()))
        if keys:
            self._commit(table, f"{self.key} IN ({', '.join(map(standard_string, keys))})")

    def append(self, rows: Iterable[Any]) -> None:
        """Add rows (dicts or dataclasses)."""
        table = self._arrow(rows)
        if table.num_rows:
            self._commit(table, None)

    def create(self) -> None:
        """Create the table, empty, unless it exists (before writers race to)."""
        with self._lock:
            try:
                self._open()
            except TableNotFoundError:
                self._table = self.location.create(
                    self.schema, configuration=self.location.retention_properties,
                    name=self._name)

    def _commit(self, rows: pa.Table, predicate: str | None) -> None:
        # A plain loop rather than a retry library: between tries the open table must move
        # to the version that won, inside the lock that serializes this instance's writes.
        with self._lock:
            for attempt in range(ATTEMPTS):
                try:
                    self._write(rows, predicate)
                    return
                except CommitFailedError:
                    if attempt == ATTEMPTS - 1:
                        raise
                    time.sleep(0.05 * (attempt + 1))
                    if self._table is not None:
                        self._table.update_incremental()

    def _write(self, rows: pa.Table, predicate: str | None) -> None:
        mode = "append" if predicate is None else "overwrite"
        try:
            table = self._open()
        except TableNotFoundError:  # the first write creates the table with its rows
            write_deltalake(self.location.uri, rows, mode=mode, predicate=predicate,
                            configuration=self.location.retention_properties, name=self._name,
                            storage_options=self.location.delta_options)
            return
        # schema_mode merge: a table made before a column existed gains it
        write_deltalake(table, rows, mode=mode, predicate=predicate, schema_mode="merge")

    def _open(self) -> DeltaTable:
        """The table, its log retention set (TableNotFoundError before its first write)."""
        if self._table is None:
            self._table = with_log_retention(self.location.open(),
                                             retention=self.location.log_retention)
        return self._table

    @property
    def _name(self) -> str:
        return self.location.uri.rstrip("/").rsplit("/", 1)[-1]

    def _arrow(self, rows: Iterable[Any]) -> pa.Table:
        return pa.Table.from_pylist([_row(row) for row in rows], schema=self.schema)


def _row(row: Any) -> dict[str, Any]:
    return row if isinstance(row, dict) else {f.name: getattr(row, f.name) for f in fields(row)}


def _value(field: Field, value: Any) -> Any:
    if value is None and field.default is not MISSING:
        return field.default
    if value is None and field.default_factory is not MISSING:
        return field.default_factory()
    return tuple(value) if isinstance(value, list) else value
