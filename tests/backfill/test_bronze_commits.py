"""How chunks reach bronze: shared commits, a reopened table, chunk sizes that vary."""

from __future__ import annotations

import time
from collections import Counter

import psycopg
import pytest
from deltalake import DeltaTable

import pipelines.backfill.bronze as bronze
import pipelines.backfill.job as job
from pipelines.backfill.chunk import ShapeCache, SnapshotBuilder, read_chunk
from pipelines.bronze.schema import SHAPE_LISTS
from pipelines.lake import Lake, TableLocation
from pipelines.source.text_format import with_text_format
from tests.support.backfill import backfill, select_text, setup_source, snapshot_rows
from tests.support.config import make_config

pytestmark = pytest.mark.pg_versions

ROWS = 300
DDL = f"""
CREATE TABLE events (id int PRIMARY KEY, body text);
INSERT INTO events SELECT i, repeat(md5(i::text), 1 + i % 5) FROM generate_series(1, {ROWS}) i;
"""


@pytest.fixture
def events(source_dsn, lake):
    setup_source(source_dsn, DDL, ["public.events"])
    return make_config(source_dsn, lake, ["public.events"])


def commits(config) -> list[dict]:
    """bronze/snapshots commits of backfills, oldest first."""
    history = Lake.from_config(config).bronze_snapshots.open().history()
    return sorted((c for c in history if "lakehouse.chunk_ids" in c), key=lambda c: c["version"])


def assert_every_row_once(config) -> list[dict]:
    rows = snapshot_rows(config)
    assert Counter(tuple(r["values"]) for r in rows) == \
        Counter(select_text(config.source.dsn, "SELECT * FROM events"))
    return rows


@pytest.mark.parametrize("commit_bytes", [job.COMMIT_BYTES, 4_000])  # 4 kB: ~3 chunks
def test_waiting_chunks_share_a_commit_that_precedes_their_high_watermarks(
        events, monkeypatch, commit_bytes):
    order: list[tuple[str, int]] = []
    write, emit = bronze.write_deltalake, job.emit_watermark

    def slow_write(table, data, **kwargs):  # chunks queue up behind a slow bronze commit
        time.sleep(0.05)
        write(table, data, **kwargs)
        ids = kwargs["commit_properties"].custom_metadata["lakehouse.chunk_ids"].split(",")
        assert len(ids) == 1 or data.column("values").nbytes <= commit_bytes
        order.extend(("commit", int(i)) for i in ids)

    def recorded_emit(conn, watermark):
        order.append((watermark.kind, watermark.chunk_id))
        return emit(conn, watermark)

    monkeypatch.setattr(bronze, "write_deltalake", slow_write)
    monkeypatch.setattr(job, "emit_watermark", recorded_emit)
    monkeypatch.setattr(job, "COMMIT_BYTES", commit_bytes)
    backfill(events, chunk_size=10)

    rows = assert_every_row_once(events)
    grouped = [c["lakehouse.chunk_ids"].split(",") for c in commits(events)]
    assert max(map(len, grouped)) > 1, grouped  # some commits held several chunks
    committed = [int(i) for ids in grouped for i in ids]
    assert len(committed) == len(set(committed))  # a chunk's rows are in one commit
    assert {r["chunk_id"] for r in rows} <= set(committed)
    highs = [chunk_id for kind, chunk_id in order if kind == "high"]
    assert set(highs) == set(committed) | {max(highs)}  # the last, empty chunk: no rows
    for chunk_id in committed:  # low -> SELECT -> bronze commit -> high, per chunk
        assert order.index(("low", chunk_id)) < order.index(("commit", chunk_id)) \
            < order.index(("high", chunk_id)), chunk_id


def test_writer_reopens_the_table_every_reopen_commits(events, monkeypatch):
    opened = []
    open_table = TableLocation.open

    def counting_open(self: TableLocation) -> DeltaTable:
        if self.uri.endswith("bronze/snapshots"):
            opened.append(self.uri)
        return open_table(self)

    monkeypatch.setattr(bronze, "REOPEN_COMMITS", 2)
    monkeypatch.setattr(TableLocation, "open", counting_open)
    backfill(events, chunk_size=25)
    monkeypatch.setattr(TableLocation, "open", open_table)
    assert_every_row_once(events)
    made = len(commits(events))
    assert made >= 3 and len(opened) == 1 + (made - 1) // 2


def test_chunks_capped_by_bytes_vary_in_size_and_still_land_once(events, monkeypatch):
    monkeypatch.setattr(job, "MAX_CHUNK_BYTES", 2_000)  # ~30-60 rows, varying with the body
    backfill(events, chunk_size=100)
    sizes = Counter(r["chunk_id"] for r in assert_every_row_once(events))
    assert len(set(sizes.values())) > 2, sizes


def test_the_first_chunk_is_small_until_the_row_width_is_known(events, monkeypatch):
    """Rows of unknown width: a first chunk of chunk_size wide rows could hold gigabytes."""
    monkeypatch.setattr(job, "FIRST_CHUNK_ROWS", 50)
    monkeypatch.setattr(job, "MAX_CHUNK_BYTES", 4_000)  # ~60-120 rows of these
    backfill(events, chunk_size=10_000)
    rows = assert_every_row_once(events)
    sizes = [n for _, n in sorted(Counter(r["chunk_id"] for r in rows).items())]
    assert sizes[0] == 50 and max(sizes) < 200, sizes


def test_builder_slices_repeated_columns_and_rebuilds_for_a_new_shape(events):
    dsn = with_text_format(events.source.dsn)
    builder = SnapshotBuilder("b1")
    shapes = ShapeCache("public.events", events.source.publication)
    batches, cursor = [], None
    with psycopg.connect(dsn, autocommit=True) as conn:
        for step, limit in enumerate([7, 3, 11, 5]):
            if step == 3:
                conn.execute("ALTER TABLE events ADD COLUMN extra int DEFAULT 4")
            raw = read_chunk(conn, shapes, cursor, limit)
            cursor = raw.last_key
            batch = builder.rows(raw.parse(), step)
            fresh = SnapshotBuilder("b1").rows(raw.parse(), step)  # built for exactly this size
            assert batch.equals(fresh) and batch.num_rows == limit
            batches.append(batch.to_pylist())
    assert [r["row_index"] for b in batches for r in b] == [*range(7), *range(3), *range(11),
                                                            *range(5)]
    assert [r["values"][0] for b in batches for r in b] == [str(i) for i in range(1, 27)]
    # the shape is on each chunk's first row, null on the others
    assert [r["columns"] for r in batches[2]] == [["id", "body"]] + [None] * 10
    assert batches[3][0]["columns"] == ["id", "body", "extra"]
    assert batches[3][0]["type_names"] == ["int4", "text", "int4"]
    assert batches[3][0]["key_columns"] == ["id"]
    assert all(r[k] is None for r in batches[3][1:] for k in SHAPE_LISTS)
    assert {(r["schema_name"], r["table_name"]) for b in batches for r in b} == {
        ("public", "events")}  # on every row: readers filter by table
    assert {r["values"][2] for r in batches[3]} == {"4"}


def test_a_value_larger_than_a_parse_block_lands_whole(source_dsn, lake):
    big = "x" * 3_000_000 + "\n\"tail\","
    setup_source(source_dsn, "CREATE TABLE blobs (id int PRIMARY KEY, body text)",
                 ["public.blobs"])
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO blobs VALUES (1, 'a'), (2, %s), (3, NULL)", (big,))
    config = make_config(source_dsn, lake, ["public.blobs"])
    backfill(config, chunk_size=10)
    rows = {r["values"][0]: r["values"][1] for r in snapshot_rows(config)}
    assert rows == {"1": "a", "2": big, "3": None}


def test_an_append_after_another_process_set_the_log_retention_is_written_again(tmp_path):
    import pyarrow as pa

    from pipelines.bronze.schema import SNAPSHOTS_SCHEMA

    path = tmp_path / "snapshots"
    DeltaTable.create(str(path), schema=SNAPSHOTS_SCHEMA)  # a lake made before the retention
    writer = bronze.SnapshotWriter(path, "b1", "public.t")
    DeltaTable(str(path)).alter.set_table_properties(  # another backfill process, meanwhile
        {"delta.logRetentionDuration": "interval 10 minutes"})
    row = {"backfill_id": "b1", "chunk_id": 0, "row_index": 0, "schema_name": "public",
           "table_name": "t", "columns": ["id"], "type_names": ["int4"], "type_oids": [23],
           "type_mods": [-1], "key_columns": ["id"], "values": ["1"]}
    writer.append([(0, pa.Table.from_pylist([row], schema=SNAPSHOTS_SCHEMA))])
    table = DeltaTable(str(path))
    assert table.version() == 2 and table.count() == 1
