"""A table's silver batch planned by reading only: what it holds, where it goes, and the
schema it will have. Every check that can stop the table without a look at the rows
(a changed primary key, an unknown history column) stops it here, before anything is
written.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructField, StructType

from pipelines.catalog import TableRef
from pipelines.errors import DataError
from pipelines.positions import Position
from pipelines.silver import history_tables
from pipelines.silver.bronze_batch import ChunkShapes, batch_events, chunk_shapes, toast_columns
from pipelines.silver.events import (
    METADATA, OLD_KEY, field as struct_field, merge_shapes, tombstone_keys)
from pipelines.silver.evolution import SchemaPlan, plan_schema
from pipelines.silver.progress import TableProgress
from pipelines.silver.scan import TableScan
from pipelines.silver.table_shape import SourceColumn, TableShape
from pipelines.silver.tables import METADATA_FIELDS, MarkBounds, SilverContext, tombstone_bounds
from pipelines.silver.types import spark_type, typed_value


@dataclass(frozen=True)
class BatchPlan:
    """One table's batch: its text events (not yet computed) and the tables it writes."""

    scan: TableScan
    shape: TableShape
    floor: Position | None  # the table's truncate floor after this batch
    floor_moved: bool  # the batch brings a new floor: it deletes what is at or below
    silver: TableRef
    marks: TableRef  # the tombstones
    events: DataFrame  # text events in (after, upto], chunks reconciled in
    changes: DataFrame | None  # the same without the chunks' rows (None: there are none)
    toast: list[str] | None  # the columns an event may leave unchanged (None: any)
    schema: SchemaPlan  # the columns the batch adds or widens
    target: StructType  # silver's schema now (or the one it is created with)
    silver_exists: bool
    marked: StructType | None  # the tombstones' schema, if the table exists
    marks_bounds: MarkBounds | None  # what their log says of them (None: no tombstone)
    after: Position  # the table's progress before the batch
    replace_tables: bool  # a rebuild: silver and tombstones are replaced
    one_chunk_row_per_key: bool = False  # proven of the chunks (bronze_batch.ChunkShapes)

    @property
    def keys(self) -> list[str]:
        return list(self.shape.key_columns)

    @property
    def carried(self) -> list[str]:
        """The source columns the batch's events carry."""
        return [c.name for c in self.shape.columns]

    @property
    def new_floor(self) -> Position | None:
        """The floor the batch applies to the tables (only a new one)."""
        return self.floor if self.floor_moved else None

    @property
    def may_be_stale(self) -> bool:
        """Whether some event of the batch may be older than its key's tombstone: only if
        a tombstone is newer than the table's progress (a replay, or a re-run after a
        crash). Every event of the batch is after the progress, and a tombstone at the
        progress's own LSN is not after it: the batch that got there held every row of
        that transaction."""
        bounds = self.marks_bounds
        return bounds is not None and bounds.newest_lsn > self.after[0]

    @cached_property
    def final(self) -> StructType:
        """Silver's schema after the batch."""
        return self.schema.final_schema(self.target)

    @property
    def types(self) -> dict[str, DataType]:
        return {f.name: f.dataType for f in self.final.fields}

    @property
    def value_columns(self) -> list[str]:
        """Silver's source columns that are not keys."""
        return [f.name for f in self.final.fields
                if f.name not in self.shape.key_columns and f.name not in METADATA]

    def old_key(self) -> list[Column]:
        """A moved row's old key values, typed as silver's keys."""
        types = self.types
        return [typed_value(SourceColumn(k, c.type_name, c.type_mod, True),
                            struct_field(F.col(OLD_KEY), k)).cast(types[k])
                for k in self.keys for c in self.shape.columns if c.name == k]


def table_floor(table: TableScan, before: TableProgress) -> Position | None:
    """The table's truncate floor once the batch is applied."""
    return max(filter(None, [before.floor, table.truncate]), default=None)


def plan_batch(run: SilverContext, table: TableScan, before: TableProgress, upto: Position,
               replace_tables: bool) -> BatchPlan | None:
    """Plan the table's batch: read the tables' schemas and the batch's chunks, change
    nothing. None when no row says what the table looks like (a bare truncate)."""
    floor = table_floor(table, before)
    shape = table.shape
    chunks = chunk_shapes(run, table) if table.windows else ChunkShapes(None, None)
    if chunks.newest is not None:
        shape = merge_shapes(shape, chunks.newest) if shape else chunks.newest
    if shape is None:
        return None
    silver = run.names.silver(shape.schema, shape.table)
    marks = run.names.tombstones(shape.schema, shape.table)
    batch_fields = [StructField(c.name, spark_type(c), True) for c in shape.columns]
    silver_exists = not replace_tables and run.exists(silver)
    target = (run.schema(silver) if silver_exists
              else StructType(batch_fields + list(METADATA_FIELDS)))
    marked = run.schema(marks) if not replace_tables and run.exists(marks) else None
    bounds = tombstone_bounds(marks) if marked is not None else None
    toast = toast_columns(run, table, shape)
    events, changes = batch_events(run, table, shape, before.position, upto,
                                   chunks.same_columns)
    if not (table.inserts or table.updates or table.deletes):
        changes = None  # bronze's statistics say so
    plan = BatchPlan(
        table, shape, floor, floor is not None and floor != before.floor, silver, marks,
        events, changes, toast,
        plan_schema(shape.qualified_name, target, batch_fields), target, silver_exists,
        marked, bounds, before.position, replace_tables,
        chunks.one_per_key and chunks.newest.key_columns == shape.key_columns)
    _check_keys(plan)
    if run.keeps_history(table.name):
        history_tables.tracked_columns(run, table, shape, plan.value_columns)
    return plan


def _check_keys(plan: BatchPlan) -> None:
    """A primary key that changed since the tombstones were written stops the table."""
    if plan.marked is None:
        return
    marked_keys = list(tombstone_keys(plan.marked.names))
    if marked_keys != plan.keys:
        raise DataError(f"{plan.shape.qualified_name}: the primary key changed from "
                        f"{marked_keys} to {plan.keys}; rebuild the table from bronze with "
                        f"`lakehouse silver --rebuild {plan.shape.qualified_name}`")

