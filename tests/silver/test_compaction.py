"""Compaction by delta-rs (the local maintenance of silver and history tables) keeps
every row where the engines' file skipping finds it: the log's statistics of the files it
writes never claim less than their rows hold."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from pipelines.catalog import TableRef
from pipelines.config import SilverConfig
from pipelines.lake import TableLocation
from pipelines.silver.maintenance import LocalMaintenance

POSITION = pa.decimal128(38, 0)  # history's _valid_from and _valid_to
PAST_64_BITS = 12_050_169_600_000_000_001  # a position at an LSN past 922 MB of WAL


def test_positions_past_64_bits_are_found_in_a_compacted_history_file(tmp_path):
    """delta-rs 1.6 caps a wide decimal's statistics at 2^63-1: a compacted file would
    claim no _valid_to above it, and a point-in-time read would skip its versions."""
    path = tmp_path / "history"
    for i in range(3):  # three small files, as three batches append them
        write_deltalake(str(path), pa.table({
            "id": [i], "_valid_to": pa.array([Decimal(PAST_64_BITS + i)], POSITION)}),
            mode="append")
    maintenance = LocalMaintenance(SilverConfig(compact_files=3))
    assert maintenance.compact(None, TableRef(TableLocation(str(path))))
    table = DeltaTable(str(path))
    assert len(table.file_uris()) == 1
    later = QueryBuilder().register("h", table).execute(
        f"SELECT id FROM h WHERE _valid_to > CAST('{PAST_64_BITS}' AS DECIMAL(38,0))")
    assert sorted(pa.table(later.read_all()).column("id").to_pylist()) == [1, 2]
