"""verify against a real pipeline run, then with planted differences in silver; the tests
marked BOTH_LAYOUTS also with silver tables by catalog names
(tests/test_verify_unity_catalog.py has what only a catalog has)."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.verify import run as verify
from pipelines.lake import read_delta
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from pipelines.silver.job import run_silver
from pipelines.source.setup import run_setup
from pipelines.verify.run import NotCaughtUp, format_diffs, run_verify
from tests.support.config import make_config
from tests.support.layouts import BOTH_LAYOUTS

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


@pytest.fixture
def pipeline(source_dsn, tmp_path, spark, layout):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE things (id int PRIMARY KEY, name text, amount numeric(10,2), "
                     "tags text[], at timestamptz, ok boolean)")
        conn.execute("CREATE TABLE pairs (a int, b text, v int, PRIMARY KEY (a, b))")
    config = make_config(source_dsn, tmp_path / "lake", ["public.things", "public.pairs"],
                         base_dir=tmp_path, ingest={"batch_seconds": 0.1}, **layout)
    run_setup(config.source)
    with psycopg.connect(source_dsn) as conn:
        conn.execute("INSERT INTO things SELECT g, 'n' || g, g * 1.25, ARRAY['a', 'b c'], "
                     "'2026-01-01 10:00+02', g % 2 = 0 FROM generate_series(1, 50) g")
        conn.execute("INSERT INTO pairs VALUES (1, 'x', 1), (1, 'y', 2)")
    with psycopg.connect(source_dsn) as conn:
        conn.execute("UPDATE things SET name = NULL WHERE id = 3")
        conn.execute("DELETE FROM things WHERE id = 4")
    run_ingest(config, IngestOptions(until_idle=0.3), StopRequested())
    run_silver(config, spark)
    return config


@BOTH_LAYOUTS
def test_silver_equals_the_source_after_the_pipeline(pipeline, spark, monkeypatch):
    threads, compare = {}, verify.compare_table

    def spy(spark, config, table, snapshot, sample):
        threads[table] = threading.current_thread().name
        return compare(spark, config, table, snapshot, sample)

    monkeypatch.setattr(verify, "compare_table", spy)
    diffs = run_verify(pipeline, spark, wait_seconds=5)
    assert [(d.table, d.equal, d.source_rows, d.silver_rows) for d in diffs] == [
        ("public.things", True, 49, 49), ("public.pairs", True, 2, 2)]
    # the tables compare at once (silver.parallel_tables), each in a thread of its own
    assert len(set(threads.values())) == 2
    assert all(name.startswith("verify") for name in threads.values())


def scratch_files(monkeypatch) -> dict[str, list[int]]:
    """Rows of each scratch file verify wrote, per table (filled as it reads the source)."""
    files, snapshot = {}, verify.source_snapshot

    def spy(spark, conn, table, publication, scratch):
        read = snapshot(spark, conn, table, publication, scratch)
        files[table] = [pq.read_metadata(f).num_rows for f in sorted(Path(scratch.uri).iterdir())]
        return read

    monkeypatch.setattr(verify, "source_snapshot", spy)
    return files


def test_the_source_is_read_in_keyset_chunks_whose_files_go_away(pipeline, spark, monkeypatch):
    monkeypatch.setattr(verify, "FIRST_CHUNK_ROWS", 7)
    monkeypatch.setattr(verify, "CHUNK_ROWS", 7)
    files = scratch_files(monkeypatch)
    with psycopg.connect(pipeline.source.dsn) as conn:
        conn.execute("DELETE FROM pairs")  # an empty table still compares (one empty file)
    run_ingest(pipeline, IngestOptions(until_idle=0.3), StopRequested())
    run_silver(pipeline, spark)
    diffs = run_verify(pipeline, spark, wait_seconds=5)
    assert [(d.table, d.equal, d.source_rows, d.silver_rows) for d in diffs] == [
        ("public.things", True, 49, 49), ("public.pairs", True, 0, 0)]
    # 49 rows: 7 full chunks, then an empty one that ends the keyset; pairs: one empty
    assert files == {"public.things": [7] * 7 + [0], "public.pairs": [0]}
    assert [f for f in Path(pipeline.lake.path, "_state", "verify").rglob("*") if f.is_file()] == []


def test_wide_rows_make_shorter_chunks_and_a_table_named_twice_compares_once(
        pipeline, spark, monkeypatch):
    monkeypatch.setattr(verify, "FIRST_CHUNK_ROWS", 5)
    monkeypatch.setattr(verify, "CHUNK_BYTES", 200)  # about 4 rows of `things`
    files = scratch_files(monkeypatch)
    diffs = run_verify(pipeline, spark, ["things", "public.things"], wait_seconds=5)
    assert [(d.table, d.equal, d.source_rows) for d in diffs] == [("public.things", True, 49)]
    sizes = files["public.things"]
    assert sum(sizes) == 49 and sizes[0] == 5 and max(sizes[1:]) < 5 and len(sizes) > 10


def test_planted_differences_are_found_by_key(pipeline, spark):
    path = str(Path(pipeline.lake.path, "silver", "public", "things"))
    table = DeltaTable(path)
    extra = read_delta(path, filter=pc.field("id") == 5)
    extra = extra.set_column(extra.schema.get_field_index("id"), "id",
                             pa.array([999], pa.int32()))
    table.delete("id = 1")
    table.update({"name": "'tampered'"}, predicate="id = 2")
    write_deltalake(path, extra, mode="append")
    pairs = DeltaTable(str(Path(pipeline.lake.path, "silver", "public", "pairs")))
    pairs.update({"v": "42"}, predicate="b = 'y'")

    diffs = {d.table: d for d in run_verify(pipeline, spark, wait_seconds=5)}
    things, pairs_diff = diffs["public.things"], diffs["public.pairs"]
    assert things.counts == {"missing": 1, "extra": 1, "different": 1}
    assert things.examples == {"missing": ["1"], "extra": ["999"], "different": ["2"]}
    assert pairs_diff.counts == {"different": 1} and pairs_diff.examples == {"different": ["1, y"]}
    report = format_diffs(diffs.values())
    assert "public.things: DIFFERENT" in report and "missing: 1 key(s), e.g. 1" in report
    assert "repair: lakehouse backfill --resync public.things" in report


@BOTH_LAYOUTS
def test_changes_not_yet_ingested_are_reported_as_not_caught_up(pipeline, spark):
    with psycopg.connect(pipeline.source.dsn) as conn:
        conn.execute("INSERT INTO things (id) VALUES (1000)")
    with pytest.raises(NotCaughtUp, match="is `lakehouse ingest` running"):
        run_verify(pipeline, spark, wait_seconds=0.5)


@BOTH_LAYOUTS
def test_wal_without_publication_changes_counts_as_caught_up(pipeline, spark):
    """No ingest attached; the server wrote WAL that holds no change of the publication."""
    with psycopg.connect(pipeline.source.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE elsewhere (id int)")
        conn.execute("INSERT INTO elsewhere VALUES (1)")
        conn.execute("CHECKPOINT")
    assert all(d.equal for d in run_verify(pipeline, spark, wait_seconds=0.5))


@BOTH_LAYOUTS
def test_silver_behind_bronze_is_reported_per_table(pipeline, spark):
    with psycopg.connect(pipeline.source.dsn) as conn:
        conn.execute("UPDATE pairs SET v = 9")
    run_ingest(pipeline, IngestOptions(until_idle=0.3), StopRequested())
    with pytest.raises(NotCaughtUp, match=r"for public\.pairs: run `lakehouse silver`"):
        run_verify(pipeline, spark, wait_seconds=5)
    run_silver(pipeline, spark, tables=["public.pairs"])  # a table-scoped run is enough
    assert all(d.equal for d in run_verify(pipeline, spark, wait_seconds=5))


def test_history_current_rows_are_checked_against_silver(pipeline, spark):
    from dataclasses import replace

    config = replace(pipeline, silver=replace(pipeline.silver, history=("public.things",)))
    run_silver(config, spark)  # history turned on: the table is rebuilt with its history
    diffs = run_verify(config, spark, wait_seconds=5)
    assert [(d.table, d.equal, d.history) for d in diffs] == [
        ("public.things", True, {}), ("public.pairs", True, None)]
    assert "history: its current rows equal silver" in format_diffs(diffs)

    history = Path(pipeline.lake.path, "silver_history", "public", "things")
    DeltaTable(str(history)).delete("id = 7")  # lose a key's versions
    DeltaTable(str(history)).update(updates={"name": "'changed'"}, predicate="id = 8")
    diffs = run_verify(config, spark, wait_seconds=5)
    assert (diffs[0].equal, diffs[0].counts, diffs[0].history) == (
        False, {}, {"missing": 1, "different": 1})
    report = format_diffs(diffs)
    assert "history: its current rows differ from silver" in report
    assert "repair: lakehouse silver --rebuild public.things" in report
