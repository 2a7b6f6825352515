"""Silver's table layout on Sail and on classic Spark with delta-spark: deletion vectors (a
MERGE marks the rows it replaces instead of rewriting their files), the batch's key range
in every MERGE, deletion vectors turned on for a table made without them, and compaction
of small files. Readers see the same rows whatever the layout."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.catalog import TableRef
from pipelines.lake import location, read_delta
from pipelines.silver.job import run_silver
from pipelines.silver.key_ranges import Reach, key_range, ranged_totals
from pipelines.silver.merge import silver_merge_sql
from pipelines.silver.merge_modes import PERSISTENT_DELETION_VECTORS
from pipelines.silver.tables import file_statistics, skips_files
from tests.support.bronze_builder import Table
from tests.support.silver_changes import ITEMS, items

pytestmark = pytest.mark.spark

TAGS = Table("public.tags", ("tag", "day", "n"), ("text", "date", "int4"), ("tag", "day"))


def last_merge(path) -> dict:
    """The newest MERGE commit's operation metrics, as numbers."""
    commit = next(c for c in DeltaTable(str(path)).history() if c["operation"] == "MERGE")
    return {k: int(v) for k, v in commit["operationMetrics"].items() if str(v).isdigit()}


def rows_beside(path, key: int) -> int:
    """The other rows of the data file that holds `key` (however the engine split the
    table into files): what a copy-on-write MERGE of that key copies."""
    for uri in DeltaTable(str(path)).file_uris():
        ids = pq.read_table(uri, columns=["id"]).column("id").to_pylist()
        if key in ids:
            return len(ids) - 1
    raise AssertionError(f"no file holds id {key}")


def with_silver(config, **settings):
    return replace(config, silver=replace(config.silver, **settings))


def silver_path(lake, table="items"):
    return lake.root / "silver" / "public" / table


def update_and_delete_one_of_200(spark, lake, config) -> dict:
    """200 rows, then a MERGE that updates id 7 and deletes id 8: its metrics, once
    silver is checked to hold the 199 rows it should."""
    lake.append_changes([ITEMS.insert(10, i, id=i, name=f"n{i}", doc="d") for i in range(200)])
    run_silver(config, spark)
    lake.append_changes([ITEMS.update(11, 0, id=7, name="seven", doc="d"),
                         ITEMS.delete(11, 1, id=8)])
    run_silver(config, spark)
    rows = items(spark, config)
    assert len(rows) == 199 and (7, "seven", "d") in rows and not [r for r in rows if r[0] == 8]
    return last_merge(silver_path(lake))


def test_a_merge_marks_the_rows_it_replaces_instead_of_rewriting_their_files(spark, lake, config):
    config = with_silver(config, copy_on_write_mb=0)  # a classic driver rewrites small tables
    metrics = update_and_delete_one_of_200(spark, lake, config)
    assert metrics["numTargetRowsCopied"] == 0  # copy-on-write would copy the other 198
    assert metrics["numTargetDeletionVectorsAdded"] >= 1
    protocol = DeltaTable(str(silver_path(lake))).protocol()
    assert protocol.reader_features == ["deletionVectors"]
    # the tombstones, a log of deletes no MERGE writes, keep the plain protocol
    marks = lake.root / "_state" / "silver_tombstones" / "public" / "items"
    assert DeltaTable(str(marks)).protocol()[:2] == (1, 2)
    assert read_delta(marks, ["id"]).column("id").to_pylist() == [8]


def test_without_deletion_vectors_tables_are_copy_on_write_until_turned_on(spark, lake, config):
    lake.append_changes([ITEMS.insert(10, i, id=i, name=f"n{i}", doc="d") for i in range(50)])
    run_silver(with_silver(config, deletion_vectors=False), spark)
    assert not DeltaTable(str(silver_path(lake))).protocol().reader_features
    beside = rows_beside(silver_path(lake), 3)
    lake.append_changes([ITEMS.update(11, 0, id=3, name="three", doc="d")])
    run_silver(with_silver(config, deletion_vectors=False), spark)
    assert last_merge(silver_path(lake))["numTargetRowsCopied"] == beside > 0

    lake.append_changes([ITEMS.update(12, 0, id=4, name="four", doc="d")])
    config = with_silver(config, copy_on_write_mb=0)  # a classic driver rewrites small tables
    run_silver(config, spark)  # the default turns them on for the existing table
    assert last_merge(silver_path(lake))["numTargetRowsCopied"] == 0
    assert DeltaTable(str(silver_path(lake))).metadata().configuration[
        "delta.enableDeletionVectors"] == "true"
    rows = items(spark, config)
    assert len(rows) == 50 and (3, "three", "d") in rows and (4, "four", "d") in rows


def test_a_classic_driver_rewrites_a_small_table_instead_of_marking_rows(spark, engine, lake,
                                                                         config):
    """delta-spark's deletion-vector MERGE runs about 8 Spark jobs more than rewriting the
    files: a classic driver rewrites a table of at most silver.copy_on_write_mb, and
    leaves the session's setting as it found it. Sail always marks the rows."""
    metrics = update_and_delete_one_of_200(spark, lake, config)
    if engine == "spark":
        assert metrics["numTargetRowsCopied"] > 0
        assert metrics["numTargetDeletionVectorsAdded"] == 0
        assert spark.conf.get(PERSISTENT_DELETION_VECTORS, None) is None
    else:
        assert metrics["numTargetRowsCopied"] == 0
    assert DeltaTable(str(silver_path(lake))).metadata().configuration[
        "delta.enableDeletionVectors"] == "true"  # the table keeps them for larger batches


def test_the_merge_carries_the_batch_key_range_as_literals(spark):
    batch = spark.createDataFrame(
        [("it's", dt.date(2026, 1, 2), dt.datetime(2026, 1, 1), 5),
         ("back\\slash", dt.date(2026, 3, 4), dt.datetime(2026, 2, 1), -2)],
        "tag string, day date, at timestamp, n bigint")
    assert key_range(batch, ["tag", "day", "at", "n"]) == (
        "t.`tag` BETWEEN 'back\\\\slash' AND 'it\\'s' AND "
        "t.`day` BETWEEN DATE'2026-01-02' AND DATE'2026-03-04' AND "
        "(t.`n` BETWEEN -2 AND -2 OR t.`n` BETWEEN 5 AND 5)")
    assert key_range(batch, ["at"]) is None  # no literal form here: no range
    assert key_range(batch.limit(0), ["n"]) is None
    recent = spark.createDataFrame([(k,) for k in [*range(1000, 1100), *range(1200, 1300),
                                                   -7, -7, 5, 2 ** 62]], "n bigint")
    assert key_range(recent, ["n"]) == (  # cut at the widest gaps, at most 8 ranges
        "(t.`n` BETWEEN -7 AND -7 OR t.`n` BETWEEN 5 AND 5 OR t.`n` BETWEEN 1000 AND 1099 OR "
        f"t.`n` BETWEEN 1200 AND 1299 OR t.`n` BETWEEN {2 ** 62} AND {2 ** 62})")
    assert ranged_totals(recent, ["n"]).reach == Reach("n", (  # the same ranges, as data
        (-7, -7), (5, 5), (1000, 1099), (1200, 1299), (2 ** 62, 2 ** 62)))
    assert ranged_totals(batch, ["tag", "n"]).reach is None  # more than the integer column
    many = spark.createDataFrame([(k * k,) for k in range(100)], "n bigint")
    ranges = key_range(many, ["n"])
    assert ranges.count("BETWEEN") == 8 and "BETWEEN 0 AND" in ranges
    assert ranges.endswith("t.`n` BETWEEN 9801 AND 9801)")  # the widest gaps are at the top
    sql = silver_merge_sql("target", "source", ["n"], ["n", "v"], ["n", "v"],
                           key_range="t.`n` BETWEEN -2 AND 5")
    assert "ON t.`n` = s.`n` AND t.`n` BETWEEN -2 AND 5\n" in sql


def test_keys_that_need_escaping_merge_inside_their_range(spark, lake, config):
    odd = ["it's", "back\\slash", "new\nline", "plain"]
    lake.append_changes([TAGS.insert(10, i, tag=t, day="2026-01-02", n=i)
                         for i, t in enumerate(odd)])
    run_silver(config, spark)
    lake.append_changes([TAGS.update(11, 0, tag="it's", day="2026-01-02", n=10),
                         TAGS.delete(11, 1, tag="back\\slash", day="2026-01-02"),
                         TAGS.insert(11, 2, tag="it's", day="2026-01-03", n=11)])
    run_silver(config, spark)
    df = spark.read.format("delta").load(str(silver_path(lake, "tags")))
    assert sorted((r.tag, r.day.isoformat(), r.n) for r in df.collect()) == [
        ("it's", "2026-01-02", 10), ("it's", "2026-01-03", 11), ("new\nline", "2026-01-02", 2),
        ("plain", "2026-01-02", 3)]


def test_small_files_are_compacted_without_changing_the_rows(spark, lake, config):
    config = with_silver(config, compact_files=3)
    for run in range(4):
        lake.append_changes([ITEMS.insert(10 + run, i, id=10 * run + i, name="n", doc="d")
                             for i in range(10)]
                            + [ITEMS.update(10 + run, 10, id=0, name=f"r{run}", doc="d")])
        run_silver(config, spark)
    table = DeltaTable(str(silver_path(lake)))
    operations = [c["operation"] for c in table.history()]
    assert "OPTIMIZE" in operations
    assert len(table.file_uris()) < 4
    rows = items(spark, config)
    assert len(rows) == 40 and rows[0] == (0, "r3", "d")
    assert sorted(read_delta(silver_path(lake), ["id"]).column("id").to_pylist()) == \
        [r[0] for r in rows]


def merge_condition(path) -> str:
    """The newest MERGE's ON condition, as the engine recorded it in the log."""
    commit = next(c for c in DeltaTable(str(path)).history() if c["operation"] == "MERGE")
    parameters = commit["operationParameters"]
    return parameters.get("mergePredicate") or parameters["predicate"]  # Sail, delta-spark


def test_the_key_range_is_left_out_where_it_would_skip_no_file(spark, lake, config):
    """A range that reaches every file only costs its test of every row: keys changed
    all over the table get the key equality alone, recent ones the range too."""
    lake.append_changes([ITEMS.insert(10, i, id=i, name="a", doc="d") for i in range(100)])
    run_silver(config, spark)
    # a later slice of keys above the table's: appended, in files of their own
    lake.append_changes([ITEMS.insert(11, i, id=1000 + i, name="a", doc="d")
                         for i in range(100)])
    run_silver(config, spark)
    lake.append_changes([ITEMS.update(12, 0, id=5, name="b", doc="d")])
    run_silver(config, spark)
    assert " AND " in merge_condition(silver_path(lake))  # the 1000s' files are skipped
    lake.append_changes([ITEMS.update(13, i, id=k, name="c", doc="d")
                         for i, k in enumerate([*range(100), *range(1000, 1100)])])
    run_silver(config, spark)
    assert " AND " not in merge_condition(silver_path(lake))
    rows = items(spark, config)
    assert len(rows) == 200 and {r[1] for r in rows} == {"c"}


@pytest.mark.parametrize("files, ranges, worth", [
    ([(1, 10), (11, 1000)], [(20, 900)], False),  # only a 10-row file is outside: 1%
    ([(1, 500), (501, 1000)], [(1, 100), (300, 400)], True),  # half the rows are outside
    ([(1, 500), (501, 1000)], [(1, 100), (900, 950)], False),  # every file is reached
])
def test_a_key_range_is_worth_its_test_where_it_skips_a_tenth_of_the_rows(
        tmp_path, files, ranges, worth):
    for low, high in files:
        write_deltalake(str(tmp_path), pa.table({"id": list(range(low, high + 1))}),
                        mode="append")
    table = TableRef(path=location(str(tmp_path)))
    assert skips_files(file_statistics(table), Reach("id", tuple(ranges))) is worth
    assert skips_files(None, Reach("id", tuple(ranges)))  # a catalog table: kept
