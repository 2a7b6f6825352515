"""The Delta logs the pipeline commits to stay short (pipelines.lake.LOG_RETENTION)."""

from __future__ import annotations

import pytest

import os

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from pipelines import lake as lake_module
from pipelines.backfill.state import BackfillState, StateStore
from pipelines.ingest.bronze_writer import read_progress
from pipelines.lake import LOG_RETENTION, trim_log, with_log_retention
from pipelines.silver.job import run_silver
from tests.support.bronze_builder import BronzeLake, Table
from tests.support.config import make_config

pytestmark = pytest.mark.spark

SHORT = {"delta.logRetentionDuration": "interval 0 seconds"}


def log_entries(path) -> list[str]:
    return sorted(os.listdir(path / "_delta_log"))


def test_tables_the_pipeline_creates_with_delta_rs_carry_the_retention(tmp_path):
    read_progress(tmp_path / "changes", "lakehouse")  # the ingest creates bronze/changes
    StateStore(tmp_path / "backfills").save(BackfillState.new("b", "public.t", None))
    for name in ("changes", "backfills"):
        configuration = DeltaTable(str(tmp_path / name)).metadata().configuration
        assert configuration.items() >= LOG_RETENTION.items()


def test_an_older_table_gets_the_retention_once(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1]}))
    table = with_log_retention(DeltaTable(path))
    assert table.version() == 1 and table.metadata().configuration.items() >= LOG_RETENTION.items()
    assert with_log_retention(DeltaTable(path)).version() == 1  # already set: no commit


def test_delta_rs_deletes_expired_logs_at_its_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(lake_module, "LOG_RETENTION", SHORT)
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [0]}))
    table = with_log_retention(DeltaTable(str(path)))
    for i in range(1, 121):  # delta-rs writes a checkpoint every 100 commits
        write_deltalake(table, pa.table({"a": [i]}), mode="append")
    commits = [e for e in log_entries(path) if e.endswith(".json")]
    assert len(commits) < 40 and commits[-1] == f"{121:020d}.json"
    assert DeltaTable(str(path)).count() == 121


def test_engine_tables_are_trimmed_after_a_run_and_stay_readable(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(lake_module, "LOG_RETENTION", SHORT)
    monkeypatch.setattr(lake_module, "TRIM_LOG_ENTRIES", 20)
    items = Table()
    bronze = tmp_path / "lake"
    lake = BronzeLake(bronze)
    config = make_config(lake=bronze)
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
    monkeypatch.setattr(lake_module, "LOG_RETENTION", SHORT)
    monkeypatch.setattr(lake_module, "TRIM_LOG_ENTRIES", 5)
    path = tmp_path / "t"
    write_deltalake(str(path), pa.table({"a": [0]}))
    table = with_log_retention(DeltaTable(str(path)))
    for i in range(1, 12):
        write_deltalake(table, pa.table({"a": [i]}), mode="append")
    table.create_checkpoint()
    log = path / "_delta_log"
    for version in range(13):  # as Sail (N.crc) and Hadoop (.N.json.crc) write them
        (log / f"{version:020d}.crc").write_text("{}")
        (log / f".{version:020d}.json.crc").write_text("")
    assert trim_log(path) is True
    kept = {e for e in log_entries(path) if e.endswith(".json")}
    assert kept == {f"{12:020d}.json"}  # the checkpoint's version and after
    assert {e for e in log_entries(path) if e.endswith(".crc")} == {
        f"{12:020d}.crc", f".{12:020d}.json.crc"}
    assert DeltaTable(str(path)).count() == 12
