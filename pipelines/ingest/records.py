"""Bronze records: one change as a plain tuple, and its conversion to Arrow.

A record is a bronze row without the fields of its transaction (commit_lsn,
change_index, xid, commit_ts) and without ingested_at: CHANGES_SCHEMA from `op` to
`message_transactional`, with the table's TableInfo in place of its seven metadata
columns. The ingest builds one per change (the hot path: a tuple, no object per field),
the writer adds the transaction fields once per transaction, and Arrow converts whole
columns at once.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Sequence

import pyarrow as pa

from pipelines.bronze.schema import CHANGES_SCHEMA, OP_MESSAGE, OP_TRUNCATE
from pipelines.ingest.relations import TableInfo

Record = tuple
"""(op, table, values, unchanged_toast, old_kind, old_values, truncate_cascade,
truncate_restart_identity, message_prefix, message_content, message_transactional)"""
_RECORD_WIDTH = 11
RECORD_SCHEMA = pa.schema([CHANGES_SCHEMA.field(name) for name in CHANGES_SCHEMA.names[4:-1]])
"""Records in Arrow: CHANGES_SCHEMA without the transaction fields and ingested_at."""


def change_record(op: str, table: TableInfo, values: Sequence[str | None],
                  unchanged: Sequence[str], old_kind: str | None = None,
                  old_values: Sequence[str | None] | None = None) -> Record:
    """An insert, update or delete."""
    return (op, table, values, unchanged, old_kind, old_values, None, None, None, None, None)


def truncate_record(table: TableInfo, cascade: bool, restart_identity: bool) -> Record:
    return (OP_TRUNCATE, table, None, (), None, None, cascade, restart_identity,
            None, None, None)


def message_record(prefix: str, content: bytes, transactional: bool) -> Record:
    return (OP_MESSAGE, None, None, (), None, None, None, None, prefix, content, transactional)


def record_batch(records: Sequence[Record]) -> pa.RecordBatch:
    """Records in Arrow (RECORD_SCHEMA): one transpose, then whole-column conversion."""
    # itemgetter per column instead of zip(*records): no per-row iterator objects for the
    # garbage collector to chase while the main thread keeps allocating.
    (op, table_infos, values, unchanged, old_kind, old_values, cascade, restart, prefix,
     content, transactional) = (list(map(itemgetter(i), records)) for i in range(_RECORD_WIDTH))
    # Table metadata: one Arrow value per distinct table (None for messages), then a
    # `take` per row. By identity: hashing a TableInfo's tuples would be slow.
    tables = list(dict(zip(map(id, table_infos), table_infos)).values())
    index_of = {id(table): i for i, table in enumerate(tables)}
    ids = pa.array(list(map(index_of.__getitem__, map(id, table_infos))), pa.int32())
    text_list = pa.list_(pa.string())

    def per_table(attribute: str, type_: pa.DataType) -> pa.Array:
        return pa.array([None if t is None else getattr(t, attribute) for t in tables],
                        type_).take(ids)

    return pa.RecordBatch.from_arrays([
        pa.array(op, pa.string()),
        per_table("schema", pa.string()),
        per_table("table", pa.string()),
        per_table("columns", text_list),
        per_table("type_names", text_list),
        per_table("type_oids", pa.list_(pa.int64())),
        per_table("type_mods", pa.list_(pa.int32())),
        per_table("key_columns", text_list),
        pa.array(values, text_list),
        pa.array(unchanged, text_list),
        pa.array(old_kind, pa.string()),
        pa.array(old_values, text_list),
        pa.array(cascade, pa.bool_()),
        pa.array(restart, pa.bool_()),
        pa.array(prefix, pa.string()),
        pa.array(content, pa.binary()),
        pa.array(transactional, pa.bool_()),
    ], schema=RECORD_SCHEMA)
