"""The bronze contract shared by ingest, backfill and silver.

`bronze/changes` holds one row per change, keyed by its position (commit_lsn,
change_index); rows land in position order. The ingest's progress (the end LSN of the
last whole transaction landed) is the Delta app transaction of the slot's name, and the
last landed position is in each commit's metadata (`lakehouse.position`). Values stay in Postgres text format; each row carries its column names,
types and key columns so it can be typed later without asking Postgres.
`bronze/snapshots` holds backfill chunk rows in the same value format. Its shape lists
(SHAPE_LISTS) are set on each chunk's first row (row_index 0) and null on its other rows,
which share them; rows written before that carry them on every row. Readers fill them in
from row 0 (`pipelines.silver.events.with_chunk_columns`).
"""

from __future__ import annotations

import pyarrow as pa

OP_INSERT = "insert"
OP_UPDATE = "update"
OP_DELETE = "delete"
OP_TRUNCATE = "truncate"
OP_MESSAGE = "message"  # pg_logical_emit_message; backfill watermarks are messages

# Logical message prefix of DBLog watermarks. Content is JSON:
# {"backfill_id": str, "chunk_id": int, "table": "schema.table", "kind": "low"|"high"}
WATERMARK_PREFIX = "lakehouse.watermark"

_TEXTS = pa.list_(pa.string())
_UTC = pa.timestamp("us", tz="UTC")

# Columns describing a row's table, shared by changes and snapshots.
_ROW_SHAPE = [
    pa.field("schema_name", pa.string()),
    pa.field("table_name", pa.string()),
    pa.field("columns", _TEXTS),  # column names in table order
    pa.field("type_names", _TEXTS),  # pg_type.typname: int4, numeric, _text, an enum's name
    pa.field("type_oids", pa.list_(pa.int64())),
    pa.field("type_mods", pa.list_(pa.int32())),  # atttypmod: numeric(p,s), varchar(n)
    pa.field("key_columns", _TEXTS),
    pa.field("values", _TEXTS),  # text format; null element = SQL NULL (or unchanged TOAST)
]

# The columns of _ROW_SHAPE that describe the table as lists, one element per column.
SHAPE_LISTS = ("columns", "type_names", "type_oids", "type_mods", "key_columns")

CHANGES_SCHEMA = pa.schema([
    pa.field("commit_lsn", pa.int64(), nullable=False),
    pa.field("change_index", pa.int64(), nullable=False),  # 0-based inside the transaction
    pa.field("xid", pa.int64()),
    pa.field("commit_ts", _UTC),
    pa.field("op", pa.string(), nullable=False),
    *_ROW_SHAPE,
    pa.field("unchanged_toast", _TEXTS),  # columns whose value the update did not send
    pa.field("old_kind", pa.string()),  # "K" old key, "O" old full row, null: none sent
    pa.field("old_values", _TEXTS),  # aligned with `columns`; null where not sent
    pa.field("truncate_cascade", pa.bool_()),
    pa.field("truncate_restart_identity", pa.bool_()),
    pa.field("message_prefix", pa.string()),
    pa.field("message_content", pa.binary()),
    pa.field("message_transactional", pa.bool_()),
    pa.field("ingested_at", _UTC),
])

SNAPSHOTS_SCHEMA = pa.schema([
    pa.field("backfill_id", pa.string(), nullable=False),
    pa.field("chunk_id", pa.int64(), nullable=False),
    pa.field("row_index", pa.int64(), nullable=False),
    *_ROW_SHAPE,
    pa.field("read_at", _UTC),
])

