"""The silver job end to end on real Delta tables under tmp_path, on Sail and on classic
Spark with delta-spark; the tests marked BOTH_LAYOUTS also with silver tables by catalog
names (engine databricks; tests/silver/test_job_unity_catalog.py has what only a catalog
has)."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from pipelines.catalog import TableNames, TableRef, read_table
from pipelines.config import Config
from pipelines.silver.job import run_silver
from pipelines.spark_jobs import is_classic
from tests.support.bronze_builder import Table
from tests.support.config import make_config
from tests.support.layouts import BOTH_LAYOUTS
from tests.support.silver_changes import (EXPECTED_ITEMS, ITEMS, MEMBERS, SNAP,
                                          every_kind_of_change, items)

pytestmark = pytest.mark.spark


def rows(spark, table: TableRef, *order):
    df = read_table(spark, table)
    return [tuple(r) for r in df.orderBy(*(order or df.columns[:1])).collect()]


def silver(config: Config, table: str) -> TableRef:
    return TableNames.from_config(config).silver("public", table)


def tombstones(config: Config) -> TableRef:
    return TableNames.from_config(config).tombstones("public", "items")


def versions(root):
    return {log.parent.relative_to(root).as_posix(): DeltaTable(str(log.parent)).version()
            for log in sorted(root.glob("**/_delta_log"))}


@BOTH_LAYOUTS
def test_run_applies_every_kind_of_change_and_a_second_run_commits_nothing(spark, lake, config,
                                                                         layout):
    every_kind_of_change(lake)
    report = run_silver(config, spark)
    assert report.upto == (21, 0) and not report.failed
    assert {t.table: (t.inserts, t.updates, t.deletes, t.truncated, t.chunks)
            for t in report.tables} == {"public.items": (4, 4, 1, False, 1),
                                         "public.members": (3, 0, 0, True, 0)}
    assert items(spark, config) == EXPECTED_ITEMS
    assert items(spark, config, with_meta=True)[-1][3:5] == (20, 0)  # at the high watermark
    assert [r[:5] for r in rows(spark, silver(config, "members"))] == [
        (1, 3, "viewer", 17, 0)]  # truncated, then inserted
    assert tombstones(config).path is not None  # state stays at lake paths in both layouts
    assert [r[:3] for r in rows(spark, tombstones(config))] == [
        (3, 14, 0)]  # 2 was inserted again: its tombstone is gone; 3 moved to 30
    assert (lake.root / "_state" / "silver_progress" / "_delta_log").is_dir()
    if layout:  # catalog tables: no silver data under the lake
        assert not (lake.root / "silver").exists()
    else:  # lake tables are registered in the session catalog as well
        assert spark.sql("SELECT count(*) FROM silver.items").collect()[0][0] == 5

    before, rows_before = versions(lake.root), items(spark, config, with_meta=True)
    again = run_silver(config, spark)
    assert again.upto is None and again.tables == () and versions(lake.root) == before
    assert items(spark, config, with_meta=True) == rows_before

    # chunk 2 completes in a later run, beside a delete
    lake.append_changes([ITEMS.watermark(22, 0, "b1", 2, "high", SNAP),
                         ITEMS.delete(23, 0, id=1)])
    run_silver(config, spark)
    assert items(spark, config)[-1] == (102, "later", "P102")
    assert [r[:2] for r in items(spark, config)] == [
        (2, "b2"), (30, "c"), (100, "old"), (101, "new"), (102, "later")]


@BOTH_LAYOUTS
def test_replaying_all_of_bronze_over_silver_changes_nothing(spark, lake, config):
    every_kind_of_change(lake)
    run_silver(config, spark)
    expected = items(spark, config, with_meta=True)
    DeltaTable(str(lake.root / "_state" / "silver_progress")).delete()  # forget progress
    run_silver(config, spark)
    assert items(spark, config, with_meta=True) == expected


@BOTH_LAYOUTS
def test_a_crash_between_merge_and_progress_is_harmless(spark, lake, config,
                                                       crash_before_progress):
    every_kind_of_change(lake)
    run_silver(config, spark)
    lake.append_changes([ITEMS.delete(30, 0, id=1), ITEMS.update(31, 0, id=2, name="b3",
                                                                 unchanged=["doc"])])
    with crash_before_progress():
        run_silver(config, spark)
    expected = [(2, "b3", "D2b"), (30, "c", "D3"), (100, "old", "P100"), (101, "new", "P101")]
    assert items(spark, config) == expected  # merged, but progress not recorded
    merged = items(spark, config, with_meta=True)
    assert run_silver(config, spark).upto == (31, 0)  # the same bronze again
    # no row changed, positions included (delta-spark may still rewrite the files the
    # replay touched, with the same rows: tests/test_delta_engines.py)
    assert items(spark, config, with_meta=True) == merged


@BOTH_LAYOUTS
def test_new_columns_widening_and_an_unsafe_type_change(spark, lake, config):
    narrow = Table(columns=("id", "name"), types=("int4", "text"))
    wide = Table(columns=("id", "name", "score", "doc"), types=("int4", "text", "int4", "text"))
    wider = Table(columns=("id", "score", "doc"), types=("int8", "int8", "text"))  # no name
    bad_before = Table("public.bad", ("id", "v"), ("int4", "int4"))
    bad_after = Table("public.bad", ("id", "v"), ("int4", "text"))
    lake.append_changes([narrow.insert(10, 0, id=1, name="a"), bad_before.insert(10, 1, id=1, v=5)])
    run_silver(config, spark)
    lake.append_changes([narrow.update(11, 0, id=1, name="a2"),  # before ADD COLUMN
                         wide.insert(12, 0, id=2, name="b", score=7, doc="d")])
    assert run_silver(config, spark).tables[0].columns_added == ("score", "doc")
    lake.append_changes([wider.insert(13, 0, id=3000000000, score=2 ** 40),
                         wider.update(13, 1, id=2, score=8, doc="d"),
                         bad_after.insert(13, 2, id=2, v="not a number")])
    report = run_silver(config, spark)
    assert [t.table for t in report.failed] == ["public.bad"]
    assert "changed type from int (silver) to string" in report.failed[0].error
    assert [t.columns_widened for t in report.tables if not t.error] == [("id", "score")]
    schema = read_table(spark, silver(config, "items")).schema
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("id", "bigint"), ("name", "string"), ("_lsn", "bigint"), ("_change_index", "bigint"),
        ("_commit_ts", "timestamp"), ("score", "bigint"), ("doc", "string")]
    # a dropped column stays in silver, NULL in the rows written since
    assert items(spark, config) == [(1, "a2", None), (2, None, "d"), (3000000000, None, None)]

    again = run_silver(config, spark)  # the stopped table stays stopped
    assert [t.table for t in again.failed] == ["public.bad"]
    rebuilt = run_silver(config, spark, rebuild=["public.bad"])
    assert not rebuilt.failed
    assert [r[:2] for r in rows(spark, silver(config, "bad"), "id")] == [
        (1, "5"), (2, "not a number")]


def test_tombstones_are_collected_after_the_retention(spark, lake):
    config = make_config(lake=lake.root, silver={"tombstone_retention_hours": 1})
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a"), ITEMS.insert(10, 1, id=2),
                         ITEMS.delete(11, 0, id=1)])
    run_silver(config, spark)
    marks = tombstones(config)
    assert [r[0] for r in rows(spark, marks)] == [1]
    lake.append_changes([ITEMS.delete(2000, 0, id=2)])  # commit time 33 min later: kept
    run_silver(config, spark)
    assert [r[0] for r in rows(spark, marks, "id")] == [1, 2]
    lake.append_changes([ITEMS.insert(5000, 0, id=3)])  # 83 min later: 1 expires, 2 stays
    run_silver(config, spark)
    assert [r[0] for r in rows(spark, marks, "id")] == [2]
    assert [r[0] for r in items(spark, config)] == [3]


def test_tombstones_are_expired_once_an_hour_of_bronze_time(spark, lake):
    """Expiring visits every tombstone (no key range narrows it): at most once per hour,
    and only when the tombstones' log says one is past the retention."""
    config = make_config(lake=lake.root, silver={"tombstone_retention_hours": 0.01})  # 36 s
    lake.append_changes([ITEMS.insert(10, 0, id=1), ITEMS.delete(11, 0, id=1)])
    run_silver(config, spark)  # nothing to expire yet: the table's first tombstone
    marks = tombstones(config)
    lake.append_changes([ITEMS.insert(100, 0, id=2)])  # 89 s later: past the retention
    run_silver(config, spark)
    assert rows(spark, marks) == []  # expired: this process's first expiry of the table
    lake.append_changes([ITEMS.insert(200, 0, id=3), ITEMS.delete(201, 0, id=3)])
    run_silver(config, spark)
    lake.append_changes([ITEMS.insert(300, 0, id=4)])  # 3's tombstone is past the retention
    run_silver(config, spark)
    assert [r[0] for r in rows(spark, marks)] == [3]  # but not an hour since the last expiry
    lake.append_changes([ITEMS.insert(3800, 0, id=5)])
    run_silver(config, spark)
    assert rows(spark, marks) == []


def test_a_batch_that_deletes_nothing_writes_no_tombstone(spark, lake, config):
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a"), ITEMS.insert(10, 1, id=2),
                         ITEMS.delete(11, 0, id=2)])
    run_silver(config, spark)
    marks = tombstones(config)
    version = DeltaTable(str(marks.path)).version()
    lake.append_changes([ITEMS.update(12, 0, id=1, name="b")])
    run_silver(config, spark)
    assert DeltaTable(str(marks.path)).version() == version  # nothing appended
    assert [r[0] for r in rows(spark, marks)] == [2]
    lake.append_changes([ITEMS.insert(13, 0, id=2, name="back")])  # revives 2
    run_silver(config, spark)
    # tombstones are a log of deletes: the row is back, its tombstone stays (harmless:
    # only older events are stale) until the retention expires it
    assert DeltaTable(str(marks.path)).version() == version
    assert [r[:2] for r in items(spark, config)] == [(1, "b"), (2, "back")]


def test_cli_verb_runs_once_and_exits_4_on_a_stopped_table(spark, lake, tmp_path, monkeypatch,
                                                            capsys):
    from pipelines import engine
    from pipelines.cli import main

    monkeypatch.setattr(engine, "get_spark", lambda config: spark)
    config_file = tmp_path / "lakehouse.yml"
    config_file.write_text(f"source: {{dsn: unused}}\nlake: {{path: {lake.root}}}\n")
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a")])
    assert main(["--config", str(config_file), "silver"]) == 0
    assert "public.items: 1 inserts" in capsys.readouterr().out
    lake.append_changes([ITEMS.insert(11, 0, id="x")])  # not an int4
    assert main(["--config", str(config_file), "silver", "--table", "items"]) == 4
    assert "cannot type source values" in capsys.readouterr().out


def test_a_truncate_without_columns_before_any_table_exists_writes_nothing(spark, lake, config):
    bare = {**ITEMS.truncate(9, 0), "columns": None, "type_names": None, "key_columns": None}
    lake.append_changes([bare])
    assert run_silver(config, spark).tables[0].truncated  # and maintenance found no table
    for path in (lake.root / "silver" / "public" / "items", tombstones(config).path):
        assert not DeltaTable.is_deltatable(str(path))


@BOTH_LAYOUTS
def test_a_truncate_without_columns_still_empties_the_table(spark, lake, config):
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a"), ITEMS.delete(10, 1, id=1),
                         ITEMS.insert(10, 2, id=2, name="b")])
    run_silver(config, spark)
    bare = {**ITEMS.truncate(11, 0), "columns": None, "type_names": None, "key_columns": None}
    lake.append_changes([bare])
    assert run_silver(config, spark).tables[0].truncated
    assert items(spark, config) == []
    assert rows(spark, tombstones(config)) == []
    lake.append_changes([ITEMS.insert(12, 0, id=1, name="back")])
    run_silver(config, spark)
    assert items(spark, config) == [(1, "back", None)]


def test_a_value_that_cannot_be_typed_stops_the_table_before_anything_is_written(
        spark, lake, config):
    lake.append_changes([ITEMS.insert(10, 0, id=1, name="a"),
                         MEMBERS.insert(10, 1, project="p1", member=1, role="x")])  # bad int4
    first = run_silver(config, spark)
    assert [t.table for t in first.failed] == ["public.members"]
    assert "column project (int4): 1 value(s) cannot be typed as int, e.g. 'p1'" \
        in first.failed[0].error
    assert not (lake.root / "silver/public/members").exists()  # not even created
    before = versions(lake.root)

    lake.append_changes([ITEMS.update(11, 0, id=1, name="b"), ITEMS.insert(11, 1, id="2x")])
    second = run_silver(config, spark)
    assert {t.table for t in second.failed} == {"public.items", "public.members"}
    assert items(spark, config) == [(1, "a", None)]  # the good update waits with the bad
    changed = {k for k, v in versions(lake.root).items() if before.get(k) != v}
    assert changed == {"bronze/changes", "_state/silver_progress"}  # only the error recorded


@pytest.mark.parametrize("toast_in_window, filled", [(False, []), (True, None)])
def test_chunks_need_the_toast_fill_only_after_a_window_change_left_a_value_unchanged(
        spark, lake, config, monkeypatch, toast_in_window, filled):
    from pipelines.silver import stage

    seen = []

    def spy(events, shape, floor=None, toast_columns=None, moved_rows=True, *rest):
        seen.append(toast_columns)
        return latest_events(events, shape, floor, toast_columns, moved_rows, *rest)

    latest_events = stage.latest_events
    monkeypatch.setattr(stage, "latest_events", spy)
    window_update = (ITEMS.update(19, 0, id=101, name="new", unchanged=["doc"], xid=93)
                     if toast_in_window else
                     ITEMS.update(19, 0, id=101, name="new", doc="P101b", xid=93))
    lake.append_changes([ITEMS.watermark(18, 0, "b1", 1, "low"), window_update,
                         ITEMS.watermark(20, 0, "b1", 1, "high", SNAP)])
    lake.append_snapshots([ITEMS.chunk_row("b1", 1, 0, id=100, name="old", doc="P100"),
                           ITEMS.chunk_row("b1", 1, 1, id=101, name="stale", doc="P101")])
    run_silver(config, spark)
    assert seen == [filled]
    assert items(spark, config) == [
        (100, "old", "P100"), (101, "new", "P101" if toast_in_window else "P101b")]


def test_a_moved_row_keeps_an_unchanged_value_while_its_columns_widen(spark, lake, config):
    narrow = Table(columns=("id", "name", "score"), types=("int4", "text", "int4"))
    wider = Table(columns=("id", "name", "score"), types=("int8", "text", "int8"))
    lake.append_changes([narrow.insert(10, 0, id=1, name="a", score=1)])
    run_silver(config, spark)
    lake.append_changes([wider.update(11, 0, id=5_000_000_000, score=2 ** 40,
                                      unchanged=["name"], old_key={"id": 1})])
    report = run_silver(config, spark)
    assert not report.failed and report.tables[0].columns_widened == ("id", "score")
    df = spark.read.format("delta").load(str(lake.root / "silver/public/items"))
    assert [tuple(r) for r in df.select("id", "name", "score").collect()] == [
        (5_000_000_000, "a", 2 ** 40)]


def test_a_chunk_without_its_first_row_stops_the_table(spark, lake, config):
    """A chunk's rows are read with the shape on its row 0: without that row they would
    silently drop out of silver, so the table stops with a data error instead."""
    lake.append_changes([ITEMS.watermark(18, 0, "b1", 1, "low"),
                         ITEMS.watermark(20, 0, "b1", 1, "high", SNAP, rows=2),
                         ITEMS.watermark(21, 0, "b1", 2, "low"),
                         ITEMS.watermark(22, 0, "b1", 2, "high", SNAP, rows=1)])
    lake.append_snapshots([ITEMS.chunk_row("b1", 1, 0, id=100, name="a", doc="P100"),
                           ITEMS.chunk_row("b1", 1, 1, id=101, name="b", doc="P101"),
                           ITEMS.chunk_row("b1", 2, 1, id=102, name="c", doc="P102")])
    report = run_silver(config, spark)
    assert [t.table for t in report.failed] == ["public.items"]
    assert "1 of 2 backfill chunks have no first row" in report.failed[0].error


def test_chunks_proven_one_row_per_key_skip_the_ordering_and_the_rest_still_apply(
        spark, lake, config, monkeypatch):
    """Chunks that follow each other's cursors are one row per key: through Spark Connect
    their lone rows skip the per-key ordering (a classic driver orders every batch), a
    row whose key a change touched does not, and a chunk whose rows landed in bronze
    twice (more rows than its high watermark says) is not proven so: silver holds every
    key once either way."""
    from pipelines.silver import batch

    split = []
    lone_chunk_rows = batch.lone_chunk_rows

    def spy(events, keys, changes):
        alone, others = lone_chunk_rows(events, keys, changes)
        split.append(sorted(r.id for r in alone.select("id").collect()))
        return alone, others

    monkeypatch.setattr(batch, "lone_chunk_rows", spy)
    first, second = {"after": None, "last": ["101"]}, {"after": ["101"], "last": ["102"]}
    lake.append_changes([ITEMS.watermark(18, 0, "b1", 1, "low"),
                         ITEMS.watermark(20, 0, "b1", 1, "high", SNAP, rows=2, keys=first),
                         ITEMS.watermark(21, 0, "b1", 2, "low"),
                         ITEMS.update(21, 1, id=102, name="changed", doc="C102", xid=95),
                         ITEMS.watermark(22, 0, "b1", 2, "high", SNAP, rows=1, keys=second),
                         ITEMS.update(23, 0, id=101, name="later", unchanged=["doc"])])
    rows = [ITEMS.chunk_row("b1", 1, 0, id=100, name="a", doc="P100"),
            ITEMS.chunk_row("b1", 1, 1, id=101, name="b", doc="P101"),
            ITEMS.chunk_row("b1", 2, 0, id=102, name="c", doc="P102")]
    lake.append_snapshots(rows)
    assert not run_silver(config, spark).failed
    proven = [] if is_classic(spark) else [["100"]]
    assert split == proven
    assert items(spark, config) == [(100, "a", "P100"), (101, "later", "P101"),
                                    (102, "changed", "C102")]

    lake.append_changes([ITEMS.watermark(30, 0, "b1", 3, "low"),
                         ITEMS.watermark(31, 0, "b1", 3, "high", SNAP, rows=1,
                                         keys={"after": ["102"], "last": ["103"]})])
    lake.append_snapshots([ITEMS.chunk_row("b1", 3, 0, id=103, name="d", doc="P103")] * 2)
    assert not run_silver(config, spark).failed
    assert split == proven  # twice in bronze: ordered per key like any batch
    assert items(spark, config)[-1:] == [(103, "d", "P103")]


def test_chunks_of_one_batch_with_different_columns_read_each_by_its_own(spark, lake, config):
    """A column added between two chunks: each chunk's rows are read by the columns on its
    own first row (a join), and silver gets the new column."""
    wider = Table(columns=("id", "score", "name", "doc"), types=("int4", "int4", "text", "text"))
    lake.append_changes([ITEMS.watermark(18, 0, "b1", 1, "low"),
                         ITEMS.watermark(20, 0, "b1", 1, "high", SNAP, rows=2),
                         ITEMS.watermark(21, 0, "b1", 2, "low"),
                         ITEMS.watermark(22, 0, "b1", 2, "high", SNAP, rows=2)])
    lake.append_snapshots([ITEMS.chunk_row("b1", 1, i, id=100 + i, name="a", doc=f"P{i}")
                           for i in range(2)]
                          + [wider.chunk_row("b1", 2, i, id=200 + i, score=i + 7, name="b",
                                             doc=f"Q{i}") for i in range(2)])
    report = run_silver(config, spark)
    assert not report.failed and report.tables[0].chunks == 2
    df = spark.read.format("delta").load(str(lake.root / "silver" / "public" / "items"))
    assert [tuple(r) for r in df.select("id", "name", "doc", "score").orderBy("id").collect()] \
        == [(100, "a", "P0", None), (101, "a", "P1", None), (200, "b", "Q0", 7),
            (201, "b", "Q1", 8)]
