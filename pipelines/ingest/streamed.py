"""A streamed transaction's changes (protocol v2), kept until its commit or abort.

Postgres streams a transaction bigger than logical_decoding_work_mem in blocks before it
commits, so its commit LSN (and with it every change's position) is unknown until the
end. Its records collect in memory; every `spill_rows` of them are converted to Arrow
and handed to the bronze writer's encoder thread, which writes them as a bronze Parquet
file with the commit's fields left to fill in (bronze_files.py). Memory stays bounded
whatever the transaction's size, and the encoding happens while the transaction streams
in, so its commit normally only fills in positions and commits the files. When an aborted
subtransaction or a replay shifts the positions, the commit reads the files back instead.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from operator import itemgetter
from typing import Iterator

import numpy as np
import pyarrow as pa

from pipelines.ingest.bronze_files import PendingFile
from pipelines.ingest.bronze_writer import BronzeWriter
from pipelines.ingest.records import RECORD_SCHEMA, Record, record_batch

_CONVERT_ROWS = 10_000  # records converted to Arrow at a time: little memory for it


@dataclass(frozen=True)
class _Block:
    """One spilled block: its file (being) written, and its records' subxids as runs."""

    file: Future[PendingFile]
    subxids: np.ndarray
    run_lengths: np.ndarray


class StreamedTransaction:
    """Changes of one streamed transaction, in arrival (WAL) order, mostly in files."""

    def __init__(self, xid: int, spill_rows: int, writer: BronzeWriter) -> None:
        self.xid = xid
        self.spill_rows = spill_rows
        self.writer = writer
        self.changes: list[tuple[int, Record]] = []  # (subxid, record): as decoded
        self.aborted_subxids: set[int] = set()
        self.spilled_rows = 0
        self._blocks: list[_Block] = []

    def add(self, change: tuple[int, Record]) -> None:
        """Keep one (subxid, record); the hot path: the decoder's tuple as it is."""
        changes = self.changes
        changes.append(change)
        if len(changes) >= self.spill_rows:
            self._spill_block()

    def _spill_block(self) -> None:
        if self._blocks:  # one block encodes while the next fills, never two: memory
            self._blocks[-1].file.result()
        changes, rows = self.changes, len(self.changes)
        table = pa.Table.from_batches(
            [record_batch(list(map(itemgetter(1), changes[start:start + _CONVERT_ROWS])))
             for start in range(0, rows, _CONVERT_ROWS)], schema=RECORD_SCHEMA)
        subxids = np.fromiter(map(itemgetter(0), changes), np.int64, rows)
        starts = np.flatnonzero(np.diff(subxids, prepend=subxids[0] - 1))
        self._blocks.append(_Block(
            self.writer.encode_pending(table, self.spilled_rows, self.xid),
            subxids[starts], np.diff(np.append(starts, rows))))
        self.spilled_rows += rows
        self.changes = []

    def files(self) -> list[PendingFile]:
        """The spilled changes as files numbered from change 0: only valid when no
        subtransaction aborted and bronze holds none of the transaction."""
        return [block.file.result() for block in self._blocks]

    def spilled(self) -> Iterator[pa.RecordBatch]:
        """The spilled changes in order (RECORD_SCHEMA), without aborted subtransactions."""
        aborted = np.array(sorted(self.aborted_subxids), dtype=np.int64)
        for block in self._blocks:
            table = block.file.result().read()
            if len(aborted):
                keep = np.repeat(~np.isin(block.subxids, aborted), block.run_lengths)
                table = table.filter(pa.array(keep))
            yield from table.to_batches(max_chunksize=_CONVERT_ROWS)

    def unspilled(self) -> list[Record]:
        """The records still in memory, without aborted subtransactions: the last changes."""
        aborted = self.aborted_subxids
        return [record for subxid, record in self.changes if subxid not in aborted]

    def close(self, committed: bool = False) -> None:
        """Delete the files, unless a commit (handed to the writer) added them."""
        for block in [] if committed else self._blocks:
            try:
                block.file.result().discard()
            except Exception:  # the writer reports a failed encoding where it is awaited
                continue
        self._blocks = []
