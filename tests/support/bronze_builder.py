"""Build bronze/changes and bronze/snapshots rows the way ingest and backfill land them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow as pa

from pipelines.bronze.landed import position_metadata
from pipelines.bronze.schema import (
    CHANGES_SCHEMA, OP_DELETE, OP_INSERT, OP_MESSAGE, OP_TRUNCATE, OP_UPDATE, SHAPE_LISTS,
    SNAPSHOTS_SCHEMA, WATERMARK_PREFIX)

EPOCH = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)


def ts(lsn: int) -> datetime:
    """A deterministic commit time per LSN."""
    return EPOCH + timedelta(seconds=lsn)


@dataclass
class Table:
    """One source table's shape; methods return bronze rows (dicts) for it."""

    name: str = "public.items"
    columns: Sequence[str] = ("id", "name", "doc")
    types: Sequence[str] = ("int4", "text", "text")
    keys: Sequence[str] = ("id",)
    mods: Sequence[int] | None = None

    @property
    def schema_name(self) -> str:
        return self.name.split(".")[0]

    @property
    def table_name(self) -> str:
        return self.name.split(".")[1]

    @property
    def shape(self):
        """The TableShape silver derives from this table's bronze rows."""
        from pipelines.silver.table_shape import SourceColumn, TableShape

        mods = self.mods or [-1] * len(self.columns)
        return TableShape(self.schema_name, self.table_name, tuple(
            SourceColumn(c, t, m, c in self.keys)
            for c, t, m in zip(self.columns, self.types, mods)))

    def _shape(self) -> dict[str, Any]:
        return {"schema_name": self.schema_name, "table_name": self.table_name,
                "columns": list(self.columns), "type_names": list(self.types),
                "type_oids": [0] * len(self.columns),
                "type_mods": list(self.mods or [-1] * len(self.columns)),
                "key_columns": list(self.keys)}

    def _values(self, values: Mapping[str, Any]) -> list[str | None]:
        unknown = set(values) - set(self.columns)
        assert not unknown, unknown
        return [None if values.get(c) is None else str(values[c]) for c in self.columns]

    def _change(self, op: str, lsn: int, index: int, xid: int | None, **extra) -> dict:
        return {"commit_lsn": lsn, "change_index": index, "end_lsn": lsn + 1,
                "xid": xid if xid is not None else lsn, "commit_ts": ts(lsn), "op": op,
                "ingested_at": EPOCH, "unchanged_toast": [], **self._shape(), **extra}

    def insert(self, lsn: int, index: int, xid: int | None = None, **values) -> dict:
        return self._change(OP_INSERT, lsn, index, xid, values=self._values(values))

    def update(self, lsn: int, index: int, xid: int | None = None,
               unchanged: Sequence[str] = (), old_key: Mapping[str, Any] | None = None,
               **values) -> dict:
        row = self._change(OP_UPDATE, lsn, index, xid, values=self._values(values),
                           unchanged_toast=list(unchanged))
        if old_key is not None:
            row.update(old_kind="K", old_values=self._values(old_key))
        return row

    def delete(self, lsn: int, index: int, xid: int | None = None, **key) -> dict:
        return self._change(OP_DELETE, lsn, index, xid, values=[None] * len(self.columns),
                            old_kind="K", old_values=self._values(key))

    def truncate(self, lsn: int, index: int, xid: int | None = None) -> dict:
        return self._change(OP_TRUNCATE, lsn, index, xid, truncate_cascade=False,
                            truncate_restart_identity=False, unchanged_toast=None)

    def watermark(self, lsn: int, index: int, backfill_id: str, chunk_id: int, kind: str,
                  snapshot: Mapping[str, Any] | None = None, xid: int | None = None,
                  rows: int | None = None, keys: Mapping[str, Any] | None = None) -> dict:
        """A watermark message; `keys`: a high one's key range ({"after": [..] or None,
        "last": [..] or None})."""
        content = {"backfill_id": backfill_id, "chunk_id": chunk_id, "table": self.name,
                   "kind": kind}
        if snapshot is not None:
            content["snapshot"] = dict(snapshot)
        if rows is not None:
            content["rows"] = rows
        if keys is not None:
            content["keys"] = dict(keys)
        return {"commit_lsn": lsn, "change_index": index, "end_lsn": lsn + 1,
                "xid": xid if xid is not None else lsn, "commit_ts": ts(lsn),
                "op": OP_MESSAGE, "message_prefix": WATERMARK_PREFIX,
                "message_content": json.dumps(content).encode(),
                "message_transactional": True, "ingested_at": EPOCH}

    def chunk_row(self, backfill_id: str, chunk_id: int, row_index: int,
                  every_row: bool = False, **values) -> dict:
        """A snapshot row: the shape lists on row 0 only (on every row if `every_row`,
        as backfills wrote them before)."""
        shape = self._shape()
        if row_index and not every_row:
            shape = {**shape, **dict.fromkeys(SHAPE_LISTS)}
        return {"backfill_id": backfill_id, "chunk_id": chunk_id, "row_index": row_index,
                **shape, "values": self._values(values), "read_at": EPOCH}


def arrow(rows: Sequence[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows],
                                schema=schema)


def spark_frame(spark, rows: Sequence[Mapping[str, Any]], schema: pa.Schema = CHANGES_SCHEMA):
    """A Spark DataFrame of bronze rows with the bronze schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    struct = from_arrow_schema(schema)
    return spark.createDataFrame([tuple(r.get(f.name) for f in schema) for r in rows], struct)


@dataclass
class BronzeLake:
    """bronze/changes and bronze/snapshots under a lake root, appended with delta-rs."""

    root: Path

    @property
    def layout(self):
        from pipelines.lake import Lake

        return Lake.of(self.root)

    def append_changes(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """One commit, which records its newest position as the ingest's commits do."""
        from deltalake import CommitProperties, write_deltalake

        if rows:
            newest = max((r["commit_lsn"], r["change_index"]) for r in rows)
            write_deltalake(str(self.root / "bronze" / "changes"), arrow(rows, CHANGES_SCHEMA),
                            mode="append", commit_properties=CommitProperties(
                                custom_metadata=position_metadata(newest)))

    def append_snapshots(self, rows: Sequence[Mapping[str, Any]]) -> None:
        from deltalake import write_deltalake

        if rows:
            write_deltalake(str(self.root / "bronze" / "snapshots"),
                            arrow(rows, SNAPSHOTS_SCHEMA), mode="append")


def assert_frames(actual, expected, order_by: Sequence[str]) -> None:
    """chispa's schema and row equality, rows sorted by `order_by` in Python: one Spark
    job per side and no sort (Sail cannot sort by arrays; classic Spark is slow to)."""
    from chispa.rows_comparer import assert_basic_rows_equality
    from chispa.schema_comparer import assert_schema_equality

    assert_schema_equality(actual.schema, expected.schema, ignore_nullable=True)

    def key(row):
        return tuple((row[c] is None, row[c]) for c in order_by)
    assert_basic_rows_equality(sorted(actual.collect(), key=key),
                               sorted(expected.collect(), key=key))
