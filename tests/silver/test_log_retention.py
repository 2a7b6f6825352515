"""The Delta logs the pipeline commits to keep `lake.log_retention` (pipelines.lake), 10
minutes unless set."""

from __future__ import annotations

import pytest

import os
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from pipelines import lake as lake_module
from pipelines.backfill.state import BackfillState, StateStore
from pipelines.ingest.bronze_writer import BronzeWriter, read_progress
from pipelines.lake import LOG_RETENTION, Lake, TableLocation, trim_log, with_log_retention
from pipelines.silver.job import run_silver
from tests.support.bronze_builder import BronzeLake, Table
from tests.support.config import make_config

pytestmark = pytest.mark.spark

SHORT = "interval 0 seconds"
KEY = "delta.logRetentionDuration"


def log_entries(path) -> list[str]:
    return sorted(os.listdir(path / "_delta_log"))


def retention(path) -> str | None:
    return DeltaTable(str(path)).metadata().configuration.get(KEY)


def test_tables_the_pipeline_creates_with_delta_rs_carry_the_retention(tmp_path):
    read_progress(tmp_path / "changes", "lakehouse")  # the ingest creates bronze/changes
    StateStore(tmp_path / "backfills").save(BackfillState.new("b", "public.t", None))
    assert retention(tmp_path / "changes") == retention(tmp_path / "backfills") == LOG_RETENTION
    assert LOG_RETENTION == "interval 10 minutes"


def test_lake_log_retention_reaches_bronze_and_the_state_tables(tmp_path):
    lake = Lake.from_config(make_config(lake=tmp_path / "lake", log_retention="2 days"))
    BronzeWriter(lake.bronze_changes, "lakehouse").close()  # creates bronze/changes
    StateStore(lake.backfills).save(BackfillState.new("b", "public.t", None))
    assert retention(lake.bronze_changes.uri) == retention(lake.backfills.uri) == "interval 2 days"
    # a changed setting realigns a table at its writer's next commit (bronze's:
    # tests/ingest/test_bronze_writer.py)
    StateStore(Lake.of(lake.root, log_retention="36 hours").backfills).save(
        BackfillState.new("c", "public.t", None))
    assert retention(lake.backfills.uri) == "interval 36 hours"


def test_an_older_table_gets_the_retention_once_and_a_changed_one_again(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1]}))
    table = with_log_retention(DeltaTable(path), retention=LOG_RETENTION)
    assert table.version() == 1 and retention(path) == LOG_RETENTION
    # already set: no commit
    assert with_log_retention(DeltaTable(path), retention=LOG_RETENTION).version() == 1
    table = with_log_retention(DeltaTable(path), retention="interval 7 days")
    assert table.version() == 2 and retention(path) == "interval 7 days"


def test_delta_rs_deletes_expired_logs_at_its_checkpoints(tmp_path):
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [0]}))
    table = with_log_retention(DeltaTable(str(path)), retention=SHORT)
    for i in range(1, 121):  # delta-rs writes a checkpoint every 100 commits
        write_deltalake(table, pa.table({"a": [i]}), mode="append")
    commits = [e for e in log_entries(path) if e.endswith(".json")]
    assert len(commits) < 40 and commits[-1] == f"{121:020d}.json"
    assert DeltaTable(str(path)).count() == 121


def test_engine_tables_are_trimmed_after_a_run_and_stay_readable(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(lake_module, "TRIM_LOG_ENTRIES", 20)
    items = Table()
    bronze = tmp_path / "lake"
    lake = BronzeLake(bronze)
    config = make_config(lake=bronze, log_retention="0 seconds")
    for n in range(1, 13):  # 12 runs: 12 silver commits (both engines checkpoint every 10)
        lake.append_changes([items.insert(10 + n, 0, id=n, name=f"n{n}")])
        run_silver(config, spark)
    silver = bronze / "silver" / "public" / "items"
    versions = {int(e.lstrip(".").split(".")[0]) for e in log_entries(silver)
                if e.lstrip(".").split(".")[0].isdigit()}
    # trimmed: only the newest checkpoint and the commits after it are left, with their
    # checksums (Sail's N.crc; Hadoop's .N.json.crc and .N.crc.crc on classic Spark)
    assert min(versions) == 10 and max(versions) >= 12
    rows = spark.read.format("delta").load(str(silver)).select("id").orderBy("id").collect()
    assert [r.id for r in rows] == list(range(1, 13))
    lake.append_changes([items.update(30, 0, id=1, name="again")])
    run_silver(config, spark)  # the engine still merges into the trimmed table
    assert spark.read.format("delta").load(str(silver)).where("id = 1").first().name == "again"


def test_trim_log_leaves_a_short_log_alone(tmp_path):
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [1]}))
    assert trim_log(path) is False and DeltaTable(str(path)).version() == 0
    assert trim_log(tmp_path / "missing") is False



def test_trim_log_never_fails_the_run_that_calls_it(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(lake_module, "TRIM_LOG_ENTRIES", 2)
    log = tmp_path / "broken" / "_delta_log"
    log.mkdir(parents=True)
    for name in ("00000000000000000000.json", "x.compacted.json", "junk"):
        (log / name).write_text("{not json")
    assert trim_log(tmp_path / "broken") is False
    assert "could not trim the Delta log" in caplog.text


def test_checksums_of_deleted_commits_go_too(tmp_path, monkeypatch):
    monkeypatch.setattr(lake_module, "TRIM_LOG_ENTRIES", 5)
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [0]}))
    table = with_log_retention(DeltaTable(str(path)), retention=SHORT)
    for i in range(1, 12):
        write_deltalake(table, pa.table({"a": [i]}), mode="append")
    table.create_checkpoint()
    log = path / "_delta_log"
    for version in range(13):  # as Sail (N.crc) and Hadoop (.N.json.crc) write them
        (log / f"{version:020d}.crc").write_text("{}")
        (log / f".{version:020d}.json.crc").write_text("")
    assert trim_log(TableLocation(str(path), log_retention=SHORT)) is True
    kept = {e for e in log_entries(path) if e.endswith(".json")}
    assert kept == {f"{12:020d}.json"}  # the checkpoint's version and after
    assert {e for e in log_entries(path) if e.endswith(".crc")} == {
        f"{12:020d}.crc", f".{12:020d}.json.crc"}
    assert DeltaTable(str(path)).count() == 12


def test_trim_log_keeps_the_log_its_retention_covers(tmp_path, monkeypatch):
    monkeypatch.setattr(lake_module, "TRIM_LOG_ENTRIES", 5)
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [0]}))
    table = with_log_retention(DeltaTable(str(path)), retention="interval 1 day")
    for i in range(1, 11):
        write_deltalake(table, pa.table({"a": [i]}), mode="append")
    table.create_checkpoint()  # at version 11
    two_hours_ago = time.time() - 2 * 3600
    for name in log_entries(path):  # a log written two hours ago
        os.utime(path / "_delta_log" / name, (two_hours_ago, two_hours_ago))
    commits = {e for e in log_entries(path) if e.endswith(".json")}
    assert trim_log(TableLocation(str(path), log_retention="interval 1 day")) is True
    assert {e for e in log_entries(path) if e.endswith(".json")} == commits  # all kept
    assert trim_log(TableLocation(str(path), log_retention="interval 1 hour")) is True
    assert retention(path) == "interval 1 hour"  # the table realigned, then trimmed
    kept = sorted(e for e in log_entries(path) if e.endswith(".json"))
    assert kept[0] == f"{11:020d}.json"  # the checkpoint's version and after
    assert DeltaTable(str(path)).count() == 11
