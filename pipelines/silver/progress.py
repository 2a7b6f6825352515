"""Silver's progress: the last bronze position applied per table, in a Delta state table.

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

from pyspark.sql import SparkSession

from pipelines.catalog import delta_path
from pipelines.lake import TableLocation
from pipelines.positions import START, Position

SCHEMA = ("table_name string, lsn long, change_index long, floor_lsn long, "
          "floor_change_index long, error string, updated_at timestamp")
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


def read_progress(spark: SparkSession, path: TableLocation, exists: bool) -> Progress:
    """The state table's content (empty progress when it does not exist yet)."""
    if not exists:
        return Progress()
    tables, scanned = {}, START
    for row in spark.read.format("delta").load(path.uri).collect():
        position = (row.lsn, row.change_index)
        if row.table_name == ALL:
            scanned = position
            continue
        floor = None if row.floor_lsn is None else (row.floor_lsn, row.floor_change_index)
        tables[row.table_name] = TableProgress(position, floor, row.error)
    return Progress(tables, scanned)


def write_progress(spark: SparkSession, path: TableLocation, exists: bool,
                   tables: dict[str, TableProgress], scanned: Position | None) -> None:
    """Upsert the given tables' rows (and the "*" row unless `scanned` is None): one commit."""
    now = datetime.now(timezone.utc)
    rows = [(name, *p.position, *(p.floor or (None, None)), p.error, now)
            for name, p in sorted(tables.items())]
    if scanned is not None:
        rows.append((ALL, *scanned, None, None, None, now))
    if not rows:
        return
    updates = spark.createDataFrame(rows, SCHEMA)
    if not exists:
        updates.write.format("delta").save(path.uri)
        return
    view = "_lakehouse_silver_progress"
    updates.createOrReplaceTempView(view)
    spark.sql(f"MERGE INTO {delta_path(path)} t USING {view} s ON t.table_name = s.table_name "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *").collect()
