"""Bronze files encoded before the commit LSN is known, then filled in and committed.

Real Parquet files under tmp_path; no Postgres, no Delta table needed.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.ingest.bronze_files import write_pending
from pipelines.ingest.records import change_record, record_batch
from pipelines.ingest.relations import TableInfo

TABLE = TableInfo("public", "t", ("id", "v"), ("int4", "text"), (23, 25), (-1, -1), ("id",))
TS = 1_767_225_600_000_000  # 2026-01-01 UTC in Unix microseconds


def records(count: int) -> pa.Table:
    return pa.Table.from_batches([record_batch(
        [change_record("insert", TABLE, (str(i), "x" * 40), ()) for i in range(count)])])


def test_finish_fills_in_the_commit_fields_and_describes_the_file(tmp_path):
    pending = write_pending(tmp_path, records(1000), first_index=5, xid=77)
    add = pending.finish(commit_lsn=4242, commit_ts=TS, ingested_at=TS + 1)
    rows = pq.read_table(pending.path).to_pylist()
    assert [r["change_index"] for r in rows] == list(range(5, 1005))
    assert {(r["commit_lsn"], r["xid"], r["commit_ts"].timestamp(),
             r["ingested_at"].timestamp()) for r in rows} == {(4242, 77, TS / 1e6, (TS + 1) / 1e6)}
    assert rows[0]["values"] == ["0", "x" * 40] and rows[0]["table_name"] == "t"
    stats = json.loads(add.stats)
    assert stats["numRecords"] == 1000
    assert (stats["minValues"]["commit_lsn"], stats["maxValues"]["commit_lsn"]) == (4242, 4242)
    assert (stats["minValues"]["change_index"], stats["maxValues"]["change_index"]) == (5, 1004)
    assert stats["nullCount"]["commit_ts"] == 0 and stats["nullCount"]["old_kind"] == 1000
    assert add.path == pending.path.name and add.size == pending.path.stat().st_size


def test_the_late_columns_cost_a_dictionary_value_not_a_value_per_row(tmp_path):
    pending = write_pending(tmp_path, records(50_000), first_index=0, xid=77)
    row_group = pq.ParquetFile(pending.path).metadata.row_group(0)
    sizes = {row_group.column(i).path_in_schema: row_group.column(i).total_compressed_size
             for i in range(row_group.num_columns)}
    assert max(sizes["commit_lsn"], sizes["commit_ts"], sizes["ingested_at"]) < 1000


def test_a_file_is_finished_once_and_a_second_attempt_fails(tmp_path):
    pending = write_pending(tmp_path, records(10), first_index=0, xid=77)
    pending.finish(4242, TS, TS)
    with pytest.raises(RuntimeError, match="unexpected layout of commit_lsn"):
        pending.finish(4343, TS, TS)  # the placeholder is gone: nothing is overwritten
    assert {r["commit_lsn"] for r in pq.read_table(pending.path).to_pylist()} == {4242}


def test_a_late_column_with_statistics_is_refused(tmp_path, monkeypatch):
    """Footer statistics would keep the placeholder: readers could skip the file by it."""
    from pipelines.ingest import bronze_files

    options = {**bronze_files._PARQUET_OPTIONS, "write_statistics": True}
    monkeypatch.setattr(bronze_files, "_PARQUET_OPTIONS", options)
    pending = write_pending(tmp_path, records(10), first_index=0, xid=77)
    with pytest.raises(RuntimeError, match="commit_lsn has statistics"):
        pending.finish(4242, TS, TS)


def test_a_local_directory_can_be_patched_in_place(tmp_path):
    from pipelines.ingest.bronze_files import can_patch_in_place

    assert can_patch_in_place(tmp_path / "bronze" / "changes")
    assert list((tmp_path / "bronze" / "changes").iterdir()) == []  # the probe is gone
