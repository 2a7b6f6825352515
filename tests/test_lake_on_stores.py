"""The lake on real object stores (MinIO for S3, Azurite for Azure Blob): table locations,
existence, listing, log trimming, delta-rs commits that two writers race for, and what
a user sees when the store refuses the credentials."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import psycopg
import pyarrow as pa
from deltalake import write_deltalake

import pipelines.lake as lake_module
from pipelines.backfill.state import BackfillState, StateStore
from pipelines.ingest.bronze_writer import BronzeWriter, read_progress
from pipelines.lake import Lake, read_delta, trim_log
from tests.support.cli import lakehouse
from tests.support.config import write_config
from tests.support.object_stores import StoreServer


def lake_on(store: StoreServer) -> Lake:
    return Lake.of(store.new_lake(), store.storage_options)


def test_tables_are_created_found_and_listed_on_the_store(store):
    lake = lake_on(store)
    assert not lake.bronze_changes.exists() and lake.delta_tables("gold") == []
    for report in ("b_report", "a_report"):
        lake.gold(report).create(pa.schema([("n", pa.int64())]))
    lake.put("gold/not_a_table/file.txt", b"x")
    assert lake.children("gold") == ["a_report", "b_report", "not_a_table"]
    assert lake.delta_tables("gold") == ["a_report", "b_report"]
    assert lake.gold("a_report").exists() and not lake.gold("not_a_table").exists()
    lake.delete_tree("gold/not_a_table")
    assert lake.children("gold") == ["a_report", "b_report"]


def test_bronze_and_state_tables_round_trip_through_delta_rs(store):
    lake = lake_on(store)
    assert read_progress(lake.bronze_changes, "slot").end_lsn == 0  # creates the table
    assert lake.bronze_changes.exists()
    states = StateStore(lake.backfills)
    states.save(BackfillState.new("b1", "public.t", 10))
    assert [s.backfill_id for s in states.all()] == ["b1"]


def test_trim_log_deletes_expired_log_files_on_the_store(store, monkeypatch):
    monkeypatch.setattr(lake_module, "TRIM_LOG_ENTRIES", 5)
    table = Lake.of(store.new_lake(), store.storage_options, "0 seconds").gold("g")
    for n in range(12):
        write_deltalake(table.uri, pa.table({"n": [n]}), mode="append",
                        storage_options=table.delta_options)
    table.open().create_checkpoint()
    assert trim_log(table) is True
    assert read_delta(table, ["n"]).num_rows == 12  # the data is all still there
    assert len(Lake.of(table.uri, dict(table.options)).children()) <= 1  # only _delta_log


RACER = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from pipelines.lake import TableLocation
    uri, writer, commits = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = tuple(tuple(pair.split("=", 1)) for pair in sys.argv[4:])
    table = TableLocation(uri, options)
    for n in range(commits):
        write_deltalake(table.uri, pa.table({"writer": [writer], "n": [n]}), mode="append",
                        storage_options=table.delta_options,
                        commit_properties=CommitProperties(custom_metadata={"w": f"{writer}-{n}"}))
""")


def test_two_writers_racing_for_one_table_lose_and_duplicate_no_commit(store):
    """Each commit is a conditional create of the next log file: two processes appending
    at once both land every commit, once (delta-rs retries a lost race on the next
    version), or fail cleanly; never overwrite each other."""
    table = lake_on(store).bronze_changes
    table.create(pa.schema([("writer", pa.string()), ("n", pa.int64())]))
    commits = 25
    options = [f"{k}={v}" for k, v in table.options]
    racers = [subprocess.Popen([sys.executable, "-c", RACER, table.uri, writer, str(commits),
                                *options], stderr=subprocess.PIPE, text=True)
              for writer in ("a", "b")]
    for racer in racers:
        _, errors = racer.communicate(timeout=300)
        assert racer.returncode == 0, errors
    rows = read_delta(table).to_pylist()
    assert sorted((r["writer"], r["n"]) for r in rows) == sorted(
        (w, n) for w in "ab" for n in range(commits))
    history = [c for c in table.open().history() if "w" in c]
    assert sorted(c["w"] for c in history) == sorted(f"{w}-{n}" for w in "ab" for n in range(commits))
    assert table.open().version() == 2 * commits  # version 0 is the create


def test_the_ingest_spills_streamed_transactions_to_local_disk_on_a_store(s3, tmp_path):
    """An object store cannot overwrite part of a file: streamed transactions are encoded
    to a local temporary directory and read back at their commit, decided by the URL."""
    writer = BronzeWriter(lake_on(s3).bronze_changes, "slot")
    try:
        assert writer.files_patchable is False
        assert writer.spill_directory.is_dir() and not str(writer.spill_directory).startswith("s3")
        spill = writer.spill_directory
    finally:
        writer.close()
    assert not spill.exists()  # removed with the writer
    local = BronzeWriter(tmp_path / "bronze", "slot")
    try:
        assert local.spill_directory == tmp_path / "bronze" and local.files_patchable
    finally:
        local.close()


def test_setup_checks_the_store_refuses_to_overwrite_and_bad_credentials_exit_5(
        s3, source_dsn, tmp_path, monkeypatch):
    config = write_config(tmp_path / "lakehouse.yml", source_dsn, s3.new_lake(),
                          storage_options=s3.storage_options)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    done = lakehouse(config, "setup", check=False)
    assert done.returncode == 0, done.stderr
    assert "(conditional writes: ok)" in done.stdout

    wrong = "wrong-secret-" + "x" * 20
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    for verb in (["status"], ["-v", "setup"], ["-v", "ingest", "--until-idle", "1"]):
        failed = lakehouse(config, *verb, check=False)
        assert failed.returncode == 5, failed.stderr[-2000:]
        assert "lake storage error" in failed.stderr
        assert wrong not in failed.stdout + failed.stderr
