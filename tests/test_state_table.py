"""The pipeline's state tables (pipelines.state_table) on real Delta tables, and silver's
progress table read and written by delta-rs where Spark wrote it."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from pipelines import state_table
from pipelines.lake import LOG_RETENTION, read_delta
from pipelines.silver.progress import (
    Progress, TableProgress, progress_rows, read_progress, write_progress)
from pipelines.state_table import TIMESTAMP, StateTable

SCHEMA = pa.schema([
    pa.field("name", pa.string(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),
    pa.field("tags", pa.list_(pa.string())),
    pa.field("flag", pa.bool_()),
    pa.field("at", TIMESTAMP),
])
AT = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Entry:
    name: str
    count: int
    tags: tuple[str, ...] | None
    flag: bool = False


def contents(table: StateTable) -> dict[str, int]:
    return {row["name"]: row["count"] for row in table.rows()}


def test_a_table_before_its_first_write_has_no_rows(tmp_path):
    table = StateTable(tmp_path / "t", SCHEMA, key="name")
    assert table.rows() == [] and table.records(Entry) == []
    table.upsert([])
    table.append([])
    assert not (tmp_path / "t").exists()  # no write, no table


def test_the_first_upsert_creates_the_table_in_one_commit_and_the_next_replace_by_key(
        tmp_path):
    table = StateTable(tmp_path / "t", SCHEMA, key="name")
    table.upsert([Entry("a", 1, ("x", "y")), {"name": "b", "count": 2}])
    delta = DeltaTable(str(tmp_path / "t"))
    assert delta.version() == 0
    assert delta.metadata().configuration["delta.logRetentionDuration"] == LOG_RETENTION
    table.upsert([{"name": "b", "count": 20, "at": AT}, Entry("c", 3, None, flag=True)])
    assert DeltaTable(str(tmp_path / "t")).version() == 1
    assert contents(table) == {"a": 1, "b": 20, "c": 3}
    # lists as tuples, a null flag as the field's default, columns without a field left out
    assert sorted(table.records(Entry), key=lambda e: e.name) == [
        Entry("a", 1, ("x", "y")), Entry("b", 20, None), Entry("c", 3, None, True)]
    assert [row["at"] for row in table.rows() if row["name"] == "b"] == [AT]


def test_a_key_with_a_quote_is_replaced_too(tmp_path):
    table = StateTable(tmp_path / "t", SCHEMA, key="name")
    table.upsert([{"name": "it's", "count": 1}])
    table.upsert([{"name": "it's", "count": 2}])
    assert contents(table) == {"it's": 2}


def test_append_adds_rows(tmp_path):
    table = StateTable(tmp_path / "t", SCHEMA)
    table.append([Entry("a", 1, None)])
    table.append([Entry("a", 2, None), Entry("b", 3, ("z",))])
    assert sorted((e.name, e.count) for e in table.records(Entry)) == [
        ("a", 1), ("a", 2), ("b", 3)]
    assert DeltaTable(str(tmp_path / "t")).version() == 1


def test_create_makes_an_empty_table_once(tmp_path):
    StateTable(tmp_path / "t", SCHEMA).create()
    StateTable(tmp_path / "t", SCHEMA).create()
    assert DeltaTable(str(tmp_path / "t")).version() == 0
    assert StateTable(tmp_path / "t", SCHEMA).rows() == []


def test_a_writer_that_lost_a_race_retries_on_the_new_version(tmp_path, monkeypatch):
    sleeps = []
    monkeypatch.setattr(state_table.time, "sleep", sleeps.append)
    StateTable(tmp_path / "t", SCHEMA, key="name").upsert(
        [{"name": "a", "count": 0}, {"name": "b", "count": 0}])
    stale = StateTable(tmp_path / "t", SCHEMA, key="name")
    stale.upsert([{"name": "a", "count": 1}])  # opens the table at version 1
    StateTable(tmp_path / "t", SCHEMA, key="name").upsert([{"name": "a", "count": 2}])
    stale.upsert([{"name": "a", "count": 3}])  # rewrites a file the other writer removed
    assert len(sleeps) == 1
    assert contents(StateTable(tmp_path / "t", SCHEMA)) == {"a": 3, "b": 0}


def test_concurrent_upserts_all_land(tmp_path):
    StateTable(tmp_path / "t", SCHEMA, key="name").upsert(
        [{"name": f"w{n}", "count": -1} for n in range(4)])  # one file: every write rewrites it

    def writer(n: int) -> None:
        table = StateTable(tmp_path / "t", SCHEMA, key="name")  # as another process would
        for count in range(5):
            table.upsert([{"name": f"w{n}", "count": count}])

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert contents(StateTable(tmp_path / "t", SCHEMA)) == {f"w{n}": 4 for n in range(4)}
    assert DeltaTable(str(tmp_path / "t")).version() == 20


def test_a_race_lost_every_time_fails_after_the_bounded_attempts(tmp_path, monkeypatch):
    attempts = []

    def lose(*args, **kwargs):
        attempts.append(1)
        raise CommitFailedError("lost")

    monkeypatch.setattr(state_table.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(state_table, "write_deltalake", lose)
    with pytest.raises(CommitFailedError):
        StateTable(tmp_path / "t", SCHEMA, key="name").upsert([{"name": "a", "count": 1}])
    assert len(attempts) == state_table.ATTEMPTS


SPARK_PROGRESS = ("table_name string, lsn long, change_index long, floor_lsn long, "
                  "floor_change_index long, error string, updated_at timestamp")


@pytest.mark.spark
def test_a_progress_table_spark_wrote_reads_and_takes_writes(spark, tmp_path):
    where = tmp_path / "silver_progress"
    rows = [("public.a", 10, 1, 5, 0, None, AT), ("*", 12, 0, None, None, None, AT)]
    spark.createDataFrame(rows, SPARK_PROGRESS).write.format("delta").save(str(where))
    assert read_progress(where) == Progress({"public.a": TableProgress((10, 1), (5, 0))}, (12, 0))
    assert [row["updated_at"] for row in progress_rows(where)] == [AT]  # UTC, tz-aware

    write_progress(where, {"public.b": TableProgress((11, 0), error="stopped")}, (13, 0))
    assert read_progress(where) == Progress({"public.a": TableProgress((10, 1), (5, 0)),
                                             "public.b": TableProgress((11, 0), error="stopped")},
                                            (13, 0))
    frame = spark.read.format("delta").load(str(where))
    assert frame.schema.simpleString() == (
        "struct<table_name:string,lsn:bigint,change_index:bigint,floor_lsn:bigint,"
        "floor_change_index:bigint,error:string,updated_at:timestamp>")
    assert sorted((r.table_name, r.lsn) for r in frame.collect()) == [
        ("*", 13), ("public.a", 10), ("public.b", 11)]
    assert read_delta(where).schema.field("updated_at").type == TIMESTAMP


def test_progress_delta_rs_writes_reads_as_spark_would_have_written_it(tmp_path):
    where = tmp_path / "silver_progress"
    assert read_progress(where) == Progress()
    write_progress(where, {"public.a": TableProgress((3, 0))}, None)
    write_progress(where, {"public.a": TableProgress((4, 2), (4, 0))}, (4, 2))
    assert read_progress(where) == Progress({"public.a": TableProgress((4, 2), (4, 0))}, (4, 2))
    assert DeltaTable(str(where)).version() == 1
    assert [f.nullable for f in read_delta(where).schema] == [True] * 7
