"""Bronze Parquet files written before their transaction's commit LSN is known.

A streamed transaction (protocol v2) arrives long before its Stream Commit, the only
message that carries its commit LSN and time. Encoding its changes to Parquet only then
serialized decoding and writing: the commit of a 1M-change transaction stopped the
ingest for seconds. Instead each spilled block is encoded as it fills (on a background
thread: Parquet encoding releases the GIL) with a placeholder in the three columns known
only at commit: commit_lsn, commit_ts and ingested_at. Those three are dictionary-encoded
(one value per file), uncompressed and without statistics, so each of their column
chunks holds the placeholder's eight bytes exactly once, in its dictionary page:
`PendingFile.finish` overwrites them with the real value in place (same length, so every
offset in the file stays valid), reads the three columns back to check, and returns the
Delta add action for a commit of the file.

Change indexes are written at encode time, so a file can only be finished as written
when nothing before it in its transaction was dropped (an aborted subtransaction) or is
in bronze already (a replay); otherwise the caller reads it back (`read`) and lands the
records like any other.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

from pipelines.bronze.schema import CHANGES_SCHEMA
from pipelines.ingest.records import RECORD_SCHEMA

_PLACEHOLDER = int.from_bytes(b"lakehous", "little")  # found by exact count, see _patch
_PLACEHOLDER_BYTES = _PLACEHOLDER.to_bytes(8, "little")
_LATE_COLUMNS = ("commit_lsn", "commit_ts", "ingested_at")  # known only at commit
_UTC = CHANGES_SCHEMA.field("commit_ts").type
_MAX_STATS_CHARS = 32  # longer strings would need delta-rs's truncation rules: no stats


def _leaf(field: pa.Field) -> str:
    return f"{field.name}.list.element" if pa.types.is_list(field.type) else field.name


_LEAVES = [_leaf(field) for field in CHANGES_SCHEMA]
# Bronze files keep min/max statistics only for the scalar columns (the ones Delta data
# skipping reads); bronze_writer.WRITER_PROPERTIES uses the same list.
SCALAR_COLUMNS = [field.name for field in CHANGES_SCHEMA if not pa.types.is_list(field.type)]
_STATS_COLUMNS = [name for name in SCALAR_COLUMNS if name not in _LATE_COLUMNS]
# ZSTD like bronze_writer.WRITER_PROPERTIES; the late columns without statistics or
# compression. Page checksums stay off: a checksum would cover the placeholder bytes.
_PARQUET_OPTIONS = dict(
    compression={leaf: "none" if leaf in _LATE_COLUMNS else "zstd" for leaf in _LEAVES},
    use_dictionary=True, write_statistics=_STATS_COLUMNS, write_page_checksum=False,
    write_page_index=False)


@dataclass(frozen=True)
class PendingFile:
    """A Parquet file of changes `first_index`, ... of one transaction, not yet committed."""

    path: Path
    rows: int
    first_index: int
    stats: dict  # Delta file statistics but commit_lsn's min and max (see _statistics)
    nbytes: int  # the rows' size in Arrow (the metric of bytes landed)

    def finish(self, commit_lsn: int, commit_ts: int, ingested_at: int) -> AddAction:
        """Fill in the late columns (Unix microseconds for the times): the add action."""
        values = {"commit_lsn": commit_lsn, "commit_ts": commit_ts, "ingested_at": ingested_at}
        metadata = pq.ParquetFile(self.path).metadata
        with open(self.path, "r+b") as file:
            for group in range(metadata.num_row_groups):
                row_group = metadata.row_group(group)
                for column in range(row_group.num_columns):
                    chunk = row_group.column(column)
                    if chunk.path_in_schema in values:
                        _patch(file, chunk, values[chunk.path_in_schema])
        written = pq.read_table(self.path, columns=list(_LATE_COLUMNS))
        for name, value in values.items():
            column = written.column(name).cast(pa.int64())
            if column.null_count or pc.min_max(column).as_py() != {"min": value, "max": value}:
                raise RuntimeError(f"{self.path}: {name} was not filled in; the file is "
                                   "not committed (the ingest stops)")
        stats = {**self.stats, "minValues": {**self.stats["minValues"], "commit_lsn": commit_lsn},
                 "maxValues": {**self.stats["maxValues"], "commit_lsn": commit_lsn}}
        status = self.path.stat()
        return AddAction(self.path.name, status.st_size, {}, int(status.st_mtime * 1000),
                         True, json.dumps(stats))

    def read(self) -> pa.Table:
        """The records as written (RECORD_SCHEMA), to land them at other positions."""
        return pq.read_table(self.path, columns=RECORD_SCHEMA.names).cast(RECORD_SCHEMA)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def write_pending(directory: Path, records: pa.Table, first_index: int,
                  xid: int) -> PendingFile:
    """Encode records (RECORD_SCHEMA) as changes `first_index`, ... of transaction `xid`
    into a new Parquet file in `directory` (the table's: a commit only adds it)."""
    rows = records.num_rows
    placeholder = pa.array(np.full(rows, _PLACEHOLDER, dtype=np.int64))
    index = pa.array(np.arange(first_index, first_index + rows, dtype=np.int64))
    table = pa.Table.from_arrays([
        placeholder, index, pa.array(np.full(rows, xid, dtype=np.int64)),
        placeholder.cast(_UTC), *records.columns, placeholder.cast(_UTC),
    ], schema=CHANGES_SCHEMA)
    path = directory / f"part-00000-{uuid.uuid4()}-c000.zstd.parquet"
    pq.write_table(table, path, row_group_size=max(rows, 1), **_PARQUET_OPTIONS)
    return PendingFile(path, rows, first_index, _statistics(table), table.nbytes)


def can_patch_in_place(directory: Path) -> bool:
    """Whether files in `directory` can be overwritten in place. FUSE mounts such as a
    Databricks volume may not seek while writing; there a streamed transaction's files
    are read back at its commit and landed like any other (never patched)."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".lakehouse-probe-{uuid.uuid4()}"
    try:
        probe.write_bytes(bytes(16))
        with open(probe, "r+b") as file:
            file.seek(8)
            file.write(_PLACEHOLDER_BYTES)
        return probe.read_bytes() == bytes(8) + _PLACEHOLDER_BYTES
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)


def _patch(file, chunk: pq.ColumnChunkMetaData, value: int) -> None:
    """Overwrite the placeholder in one column chunk: found exactly once, or fail.

    Statistics in the footer would keep the placeholder (and let readers skip the file
    by it), so a chunk that has any is refused too."""
    if chunk.is_stats_set:
        raise RuntimeError(f"{file.name}: {chunk.path_in_schema} has statistics; the file "
                           "is not committed (the ingest stops)")
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    file.seek(start)
    region = file.read(chunk.total_compressed_size)
    if region.count(_PLACEHOLDER_BYTES) != 1:
        raise RuntimeError(f"{file.name}: unexpected layout of {chunk.path_in_schema}; "
                           "the file is not committed (the ingest stops)")
    file.seek(start + region.find(_PLACEHOLDER_BYTES))
    file.write(value.to_bytes(8, "little", signed=True))


def _statistics(table: pa.Table) -> dict:
    """Delta file statistics as delta-rs writes them, except min/max of commit_lsn (added
    by `finish`) and of timestamps, booleans, binary and long strings: fewer statistics
    only skip less, while delta-rs's rounding and truncation rules are not repeated."""
    minimum, maximum, nulls = {}, {}, {}
    for name in _STATS_COLUMNS + list(_LATE_COLUMNS):
        column = table.column(name)
        nulls[name] = column.null_count
        if name in _LATE_COLUMNS or column.null_count == len(column) or not (
                pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
            continue
        low, high = pc.min_max(column).values()
        low, high = low.as_py(), high.as_py()
        if isinstance(low, str) and max(len(low), len(high)) > _MAX_STATS_CHARS:
            continue
        minimum[name], maximum[name] = low, high
    return {"numRecords": table.num_rows, "minValues": minimum, "maxValues": maximum,
            "nullCount": nulls}
