"""A streamed transaction's changes (protocol v2), kept until its commit or abort.

Postgres streams a transaction bigger than logical_decoding_work_mem in blocks before it
commits, so its commit LSN (and with it every change's position) is unknown until the
end. Its records collect in memory; every `spill_rows` of them are converted to Arrow
and appended to a temp file (Arrow IPC) with their subtransaction ids. Memory stays
bounded whatever the transaction's size, and the Arrow conversion happens while the
transaction streams in, so its commit only filters, numbers and writes.
"""

from __future__ import annotations

import tempfile
from typing import IO, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.ingest.records import RECORD_SCHEMA, Record, record_batch

_SPILL_SCHEMA = RECORD_SCHEMA.append(pa.field("subxid", pa.int64()))
_SPILL_BATCH_ROWS = 10_000  # rows per Arrow batch in the spill file


class StreamedTransaction:
    """Changes of one streamed transaction, in arrival (WAL) order, partly on disk."""

    def __init__(self, spill_rows: int) -> None:
        self.spill_rows = spill_rows
        self.records: list[Record] = []
        self.subxids: list[int] = []
        self.aborted_subxids: set[int] = set()
        self._file: IO[bytes] | None = None
        self._spill: pa.ipc.RecordBatchStreamWriter | None = None

    def add(self, subxid: int, record: Record) -> None:
        self.records.append(record)
        self.subxids.append(subxid)
        if len(self.records) >= self.spill_rows:
            self._spill_block()

    def _spill_block(self) -> None:
        if self._spill is None:
            self._file = tempfile.TemporaryFile(prefix="lakehouse-stream-")
            self._spill = pa.ipc.new_stream(self._file, _SPILL_SCHEMA)
        # Converted and stored in small Arrow batches: little memory for the conversion
        # now, and for reading back at the commit.
        for start in range(0, len(self.records), _SPILL_BATCH_ROWS):
            end = start + _SPILL_BATCH_ROWS
            block = record_batch(self.records[start:end])
            self._spill.write_batch(pa.RecordBatch.from_arrays(
                [*block.columns, pa.array(self.subxids[start:end], pa.int64())],
                schema=_SPILL_SCHEMA))
        self.records, self.subxids = [], []

    def spilled(self) -> Iterator[pa.RecordBatch]:
        """The spilled changes in order (RECORD_SCHEMA), without aborted subtransactions."""
        if self._spill is None:
            return
        self._spill.close()
        self._file.seek(0)
        aborted = pa.array(sorted(self.aborted_subxids), pa.int64())
        for block in pa.ipc.open_stream(self._file):
            if len(aborted):
                block = block.filter(pc.invert(pc.is_in(block.column("subxid"), aborted)))
            yield block.drop_columns(["subxid"])

    def unspilled(self) -> list[Record]:
        """The records still in memory, without aborted subtransactions: the last changes."""
        if not self.aborted_subxids:
            return self.records
        aborted = self.aborted_subxids
        return [record for record, subxid in zip(self.records, self.subxids)
                if subxid not in aborted]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
