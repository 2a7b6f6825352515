"""Silver's progress: the last bronze position applied per table, in a state table
(pipelines.state_table: delta-rs, no Spark job).

One row per source table ("schema.table") plus one row "*": the position up to which
bronze was scanned for every table of the configuration (a table first seen later
starts there, so a run never re-reads all of bronze to discover tables). A row also
keeps the table's truncate floor and the error that stopped it, if any.

Progress is written after the table's MERGE statements. A crash in between is harmless:
the next run applies the same bronze again and the position-guarded MERGE changes
nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa

from pipelines.lake import TableLocation
from pipelines.positions import START, Position
from pipelines.state_table import TIMESTAMP, StateTable

# Every column nullable, as in a progress table Spark wrote (a lake may hold one: it reads
# and takes writes as it is).
SCHEMA = pa.schema([
    pa.field("table_name", pa.string()),  # schema.table, or ALL
    pa.field("lsn", pa.int64()),
    pa.field("change_index", pa.int64()),
    pa.field("floor_lsn", pa.int64()),  # the latest truncate (null: none)
    pa.field("floor_change_index", pa.int64()),
    pa.field("error", pa.string()),
    pa.field("updated_at", TIMESTAMP),
])
ALL = "*"


@dataclass(frozen=True)
class TableProgress:
    """Where one table stands."""

    position: Position
    floor: Position | None = None  # its latest truncate: events at or below are void
    error: str | None = None


@dataclass(frozen=True)
class Progress:
    """Every table's progress and the position bronze was scanned to for all tables."""

    tables: dict[str, TableProgress] = field(default_factory=dict)
    scanned: Position = START

    def of(self, table: str) -> TableProgress:
        return self.tables.get(table) or TableProgress(self.scanned)


def read_progress(where: TableLocation) -> Progress:
    """The state table's content (empty progress before its first write)."""
    tables, scanned = {}, START
    for row in _state(where).rows():
        position = (row["lsn"], row["change_index"])
        if row["table_name"] == ALL:
            scanned = position
            continue
        floor = (None if row["floor_lsn"] is None
                 else (row["floor_lsn"], row["floor_change_index"]))
        tables[row["table_name"]] = TableProgress(position, floor, row["error"])
    return Progress(tables, scanned)


def progress_rows(where: TableLocation) -> list[dict]:
    """Each table's row as stored (not the ALL row): what status and metrics show."""
    return [row for row in _state(where).rows() if row["table_name"] != ALL]


def write_progress(where: TableLocation, tables: dict[str, TableProgress],
                   scanned: Position | None) -> None:
    """Upsert the given tables' rows (and the ALL row unless `scanned` is None): one commit."""
    now = datetime.now(timezone.utc)
    rows = [_row(name, p.position, p.floor, p.error, now) for name, p in sorted(tables.items())]
    if scanned is not None:
        rows.append(_row(ALL, scanned, None, None, now))
    _state(where).upsert(rows)


def _row(table: str, position: Position, floor: Position | None, error: str | None,
         now: datetime) -> dict:
    lsn, index = position
    floor_lsn, floor_index = floor or (None, None)
    return {"table_name": table, "lsn": lsn, "change_index": index, "floor_lsn": floor_lsn,
            "floor_change_index": floor_index, "error": error, "updated_at": now}


def _state(where: TableLocation) -> StateTable:
    return StateTable(where, SCHEMA, key="table_name")
