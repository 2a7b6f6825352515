"""Bronze rows -> per-table change events with one text column per source column.

An event is the text-level unit every silver transform works on:

    <source columns> (string, Postgres text)   _lsn, _change_index, _commit_ts
    _cdc_op         'upsert' | 'delete'
    _cdc_unchanged  array<string>: columns whose value the event did not send (TOAST)
    _cdc_old_key    struct of the old key's text values when an update sent one, else null
    _cdc_xid        the source transaction's 32-bit xid (null for backfill rows)
    _cdc_change     what made the event: insert, update, delete or snapshot (a backfill row)

Bronze rows name their columns in arrays, so a row written before an ADD COLUMN simply
has no value for the new column (null), and the newest rows decide the table's shape.
"""

from __future__ import annotations

from typing import Any, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from pipelines.bronze.schema import OP_DELETE, OP_INSERT, OP_UPDATE
from pipelines.errors import DataError
from pipelines.names import quote
from pipelines.silver.table_shape import SourceColumn, TableShape

LSN, CHANGE_INDEX, COMMIT_TS = "_lsn", "_change_index", "_commit_ts"
METADATA = (LSN, CHANGE_INDEX, COMMIT_TS)


def tombstone_keys(columns: Sequence[str]) -> tuple[str, ...]:
    """The key columns of a tombstone table (its other columns are METADATA)."""
    return tuple(c for c in columns if c not in METADATA)
OP, UNCHANGED, OLD_KEY, XID = "_cdc_op", "_cdc_unchanged", "_cdc_old_key", "_cdc_xid"
CHANGE, SNAPSHOT = "_cdc_change", "snapshot"
UPSERT, DELETE = "upsert", "delete"
DATA_OPS = (OP_INSERT, OP_UPDATE, OP_DELETE)


def col(name: str) -> Column:
    """A column by its exact name (source names may hold dots, spaces or backticks)."""
    return F.col(quote(name))


def shape_from_row(schema: str, table: str, row: Any) -> TableShape:
    """The TableShape of one bronze row's (columns, type_names, type_mods, key_columns)."""
    columns, type_names, type_mods, keys = (row["columns"], row["type_names"],
                                            row["type_mods"], row["key_columns"] or [])
    if not columns or len(type_names or []) != len(columns):
        raise DataError(f"{schema}.{table}: bronze row has no usable column list "
                        f"(columns={columns!r}, type_names={type_names!r})")
    mods = list(type_mods or []) + [-1] * (len(columns) - len(type_mods or []))
    shape = TableShape(schema, table, tuple(
        SourceColumn(name, type_name, -1 if mod is None else mod, name in keys)
        for name, type_name, mod in zip(columns, type_names, mods)))
    check_shape(shape)
    return shape


def check_shape(shape: TableShape) -> None:
    """Refuse shapes silver cannot hold: no key, or columns named like silver's own."""
    if not shape.key_columns:
        raise DataError(f"{shape.qualified_name}: bronze rows name no key columns; silver "
                        "merges by primary key (give the table a primary key or replica "
                        "identity index, then backfill it)")
    clash = [c.name for c in shape.columns
             if c.name.lower() in METADATA or c.name.lower().startswith("_cdc_")]
    if clash:
        raise DataError(f"{shape.qualified_name}: columns {clash} clash with silver's "
                        "metadata columns (_lsn, _change_index, _commit_ts, _cdc_*); "
                        "rename them in the source")


def merge_shapes(newer: TableShape, other: TableShape | None) -> TableShape:
    """`newer`, plus columns only `other` has (appended): a backfill may see a new column
    before any change carries the Relation message that announces it."""
    if other is None:
        return newer
    known = {c.name for c in newer.columns}
    extra = tuple(SourceColumn(c.name, c.type_name, c.type_mod, False)
                  for c in other.columns if c.name not in known)
    return TableShape(newer.schema, newer.table, newer.columns + extra)


def _element(values: str, name: str) -> Column:
    index = F.array_position(F.col("columns"), F.lit(name)).cast("int")
    return F.when(index > 0, F.element_at(F.col(values), index))


def _old_key(shape: TableShape) -> Column:
    keys = shape.key_columns
    old = [_element("old_values", k) for k in keys]
    sent = F.col("old_kind").isNotNull() & F.col("old_values").isNotNull()
    differs = F.lit(False)
    for key, value in zip(keys, old):
        differs = differs | ~value.eqNullSafe(_element("values", key))
    return F.when(sent & differs, F.struct(*(v.alias(k) for k, v in zip(keys, old))))


def changes_to_events(changes: DataFrame, shape: TableShape) -> DataFrame:
    """Data rows (insert/update/delete) of bronze/changes -> text events of `shape`.

    A delete's key comes from its old tuple; an update that changed the key keeps the old
    key in _cdc_old_key (expand_key_changes turns it into a delete of the old key).
    """
    rows = changes.filter(F.col("op").isin(*DATA_OPS))
    is_delete = F.col("op") == OP_DELETE
    keys = set(shape.key_columns)
    values = []
    for c in shape.columns:
        new = _element("values", c.name)
        if c.name in keys:
            value = F.when(is_delete, F.coalesce(_element("old_values", c.name), new)) \
                .otherwise(new)
        else:
            value = F.when(~is_delete, new)
        values.append(value.cast(StringType()).alias(c.name))
    no_columns = F.array().cast(ArrayType(StringType()))
    return rows.select(
        *values,
        F.col("commit_lsn").alias(LSN),
        F.col("change_index").alias(CHANGE_INDEX),
        F.col("commit_ts").alias(COMMIT_TS),
        F.when(is_delete, F.lit(DELETE)).otherwise(F.lit(UPSERT)).alias(OP),
        F.when(is_delete, no_columns)
        .otherwise(F.coalesce(F.col("unchanged_toast"), no_columns)).alias(UNCHANGED),
        F.when(F.col("op") == OP_UPDATE, _old_key(shape)).alias(OLD_KEY),
        F.col("xid").alias(XID),
        F.col("op").alias(CHANGE),
    )


def first_rows(snapshots: DataFrame) -> DataFrame:
    """Each chunk's first row (row_index 0): the one that holds the chunk's shape lists."""
    return snapshots.filter(F.col("row_index") == 0)


def with_chunk_columns(snapshots: DataFrame, same: Sequence[str] | None = None) -> DataFrame:
    """bronze/snapshots rows, each with its chunk's `columns` (what snapshot_rows reads).

    The backfill writes them on a chunk's first row only, so they are joined back from
    there; `snapshots` must hold that row of every chunk it holds a row of. If every
    chunk has the same columns (`same`), they are set as a literal instead: no join.
    Rows of older backfills carry them on every row and come out the same either way.
    """
    if same is not None:
        return snapshots.withColumn("columns", F.array(*(F.lit(c) for c in same)))
    firsts = first_rows(snapshots).select("backfill_id", "chunk_id", "columns")
    return snapshots.drop("columns").join(firsts, ["backfill_id", "chunk_id"])


def snapshot_rows(snapshots: DataFrame, shape: TableShape) -> DataFrame:
    """bronze/snapshots rows -> (_cdc_backfill_id, _cdc_chunk_id, <source columns as text>)."""
    return snapshots.select(
        F.col("backfill_id").alias("_cdc_backfill_id"), F.col("chunk_id").alias("_cdc_chunk_id"),
        *(_element("values", c.name).cast(StringType()).alias(c.name) for c in shape.columns))


def value_columns(shape: TableShape) -> Sequence[str]:
    """Non-key source columns: the ones an event may leave unchanged."""
    return [c.name for c in shape.columns if not c.is_key]


def no_old_key(keys: Sequence[str]) -> Column:
    """A null _cdc_old_key of the type changes_to_events gives it."""
    return F.when(F.lit(False), F.struct(*(F.lit(None).cast(StringType()).alias(k)
                                           for k in keys)))


def field(struct: Column, name: str) -> Column:
    """struct.name, null when the struct is null (Sail 0.7.2 gives '' or 0 there instead)."""
    return F.when(struct.isNotNull(), struct.getField(name))
