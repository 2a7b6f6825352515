"""The silver MERGE tests a column for "unchanged" only where an event can leave it so."""

from __future__ import annotations

from pipelines.silver.merge import silver_merge_sql

COLUMNS = ["id", "name", "doc", "_lsn", "_change_index", "_commit_ts"]


def merge(unchanged):
    return silver_merge_sql("delta.`/lake/silver/public/items`", "events", ["id"], COLUMNS,
                            ["id", "name", "doc"], unchanged=unchanged)


def test_any_value_column_may_be_unchanged_by_default():
    sql = merge(None)
    assert "`name` = CASE WHEN array_contains(s._cdc_unchanged, 'name') THEN t.`name`" in sql
    assert "`doc` = CASE WHEN array_contains(s._cdc_unchanged, 'doc') THEN t.`doc`" in sql
    assert "CASE WHEN array_contains(s._cdc_unchanged, 'doc') THEN NULL ELSE s.`doc` END" in sql


def test_only_the_listed_columns_are_tested():
    sql = merge(["doc"])
    assert "`name` = s.`name`" in sql and "'name'" not in sql
    assert "`doc` = CASE WHEN array_contains(s._cdc_unchanged, 'doc') THEN t.`doc`" in sql


def test_a_batch_without_unchanged_columns_copies_every_value():
    sql = merge([])
    assert "array_contains" not in sql
    assert "VALUES (s.`id`, s.`name`, s.`doc`, s.`_lsn`, s.`_change_index`, s.`_commit_ts`)" in sql
