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
_RECORD_FIELDS = ("op", None, "values", "unchanged_toast", "old_kind", "old_values",
                  "truncate_cascade", "truncate_restart_identity", "message_prefix",
                  "message_content", "message_transactional")  # RECORD_SCHEMA name per item
_FIRST_RARE = 6  # the truncate and message items
_TABLE_FIELDS = {"schema": "schema_name", "table": "table_name", "columns": "columns",
                 "type_names": "type_names", "type_oids": "type_oids",
                 "type_mods": "type_mods", "key_columns": "key_columns"}  # TableInfo's
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
    rows = len(records)

    # itemgetter per column instead of zip(*records): no per-row iterator objects for the
    # garbage collector to chase while the main thread keeps allocating.
    def column(index: int) -> list:
        return list(map(itemgetter(index), records))

    def convert(index: int) -> pa.Array:
        type_ = RECORD_SCHEMA.field(_RECORD_FIELDS[index]).type
        values = column(index)
        if values.count(None) == rows:  # old values of inserts, say: no conversion needed
            return pa.nulls(rows, type_)
        return pa.array(values, type_)

    op = column(0)
    # Table metadata: one Arrow value per distinct table (None for messages), then a
    # `take` per row. By identity: hashing a TableInfo's tuples would be slow.
    table_infos = column(1)
    tables = list(dict(zip(map(id, table_infos), table_infos)).values())
    if len(tables) == 1:  # the common case: skip a pass over the records
        ids = pa.repeat(pa.scalar(0, pa.int32()), rows)
    else:
        index_of = {id(table): i for i, table in enumerate(tables)}
        ids = pa.array(list(map(index_of.__getitem__, map(id, table_infos))), pa.int32())

    def per_table(attribute: str) -> pa.Array:
        return pa.array([None if t is None else getattr(t, attribute) for t in tables],
                        RECORD_SCHEMA.field(_TABLE_FIELDS[attribute]).type).take(ids)

    # Truncate and message fields are None in every other record: skip their transpose.
    rare = OP_TRUNCATE in op or OP_MESSAGE in op
    return pa.RecordBatch.from_arrays([
        pa.array(op, pa.string()), *map(per_table, _TABLE_FIELDS),
        *(convert(index) if index < _FIRST_RARE or rare
          else pa.nulls(rows, RECORD_SCHEMA.field(name).type)
          for index, name in enumerate(_RECORD_FIELDS) if index >= 2),
    ], schema=RECORD_SCHEMA)
