"""Chunk batches into bronze/snapshots: one Delta commit per chunk or per group of chunks.

delta-rs (1.x) makes each commit through one DeltaTable object slower than the one
before: ~0.1 ms more CPU per earlier commit (measured: 10 ms at the 100th, 70 ms at the
800th), quadratic over a large table's thousands of chunks. A freshly opened table
starts from the latest checkpoint (delta-rs writes one every 100 commits), so the writer
opens it again every REOPEN_COMMITS commits. (Much of that growth is delta-rs listing
the whole _delta_log on a local disk, which the log retention bounds: pipelines.lake.)
"""

from __future__ import annotations

import pyarrow as pa
from deltalake import ColumnProperties, CommitProperties, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError

from pipelines.lake import Where, location

REOPEN_COMMITS = 100
# Dictionaries and min/max statistics of the list columns cost write time and buy nothing
# (measured when every row carried the shape lists; dictionaries for the constant id and
# name columns changed nothing since); ids keep statistics so readers can prune files by
# chunk. LZ4_RAW writes ~25% faster than ZSTD, files ~2x larger.
BRONZE_WRITER = WriterProperties(
    compression="LZ4_RAW",
    default_column_properties=ColumnProperties(dictionary_enabled=False, statistics_enabled="NONE"),
    column_properties={name: ColumnProperties(dictionary_enabled=False, statistics_enabled="CHUNK")
                       for name in ("backfill_id", "chunk_id", "schema_name", "table_name")})


class SnapshotWriter:
    """Appends one backfill's chunks to bronze/snapshots (one writer per table job)."""

    def __init__(self, where: Where, backfill_id: str, table: str) -> None:
        self.location = location(where)
        self.backfill_id = backfill_id
        self.table = table
        self._delta = self.location.open()
        self._commits = 0

    def append(self, chunks: list[tuple[int, pa.Table]]) -> None:
        """Commit the rows of these chunks (id, batch) together; empty chunks write nothing."""
        batches = [batch for _, batch in chunks if batch.num_rows]
        if not batches:
            return
        if self._commits == REOPEN_COMMITS:
            self._delta, self._commits = self.location.open(), 0
        rows = pa.concat_tables(batches)
        properties = CommitProperties(custom_metadata={
            "lakehouse.backfill_id": self.backfill_id,
            "lakehouse.chunk_ids": ",".join(str(chunk_id) for chunk_id, _ in chunks),
            "lakehouse.table": self.table})
        for attempt in (1, 2):
            try:
                write_deltalake(self._delta, rows, mode="append",
                                writer_properties=BRONZE_WRITER, commit_properties=properties)
                break
            except CommitFailedError:
                # Appends never conflict with each other; a metadata commit does (another
                # backfill process setting the log retention on a lake made before it).
                # Nothing of this attempt is in the table: write it again, once.
                if attempt == 2:
                    raise
                self._delta = self.location.open()
        self._commits += 1
