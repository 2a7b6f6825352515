"""Qualified table names and quoting for Spark SQL, Postgres and delta-rs predicates."""

from __future__ import annotations

from datetime import date

import pytest

from pipelines.names import (
    pg_identifier, qualify_table, quote, spark_literal, spark_string, split_table,
    standard_string)


def test_a_table_without_a_schema_is_public_s():
    assert qualify_table("items") == "public.items"
    assert qualify_table("sales.orders") == "sales.orders"


def test_split_keeps_dots_in_the_table_part():
    assert split_table("public.items") == ("public", "items")
    assert split_table("odd.name.with.dots") == ("odd", "name.with.dots")
    with pytest.raises(ValueError):
        split_table("items")


def test_spark_quoting_doubles_backticks_and_escapes_backslashes():
    assert quote("my`col") == "`my``col`"
    assert spark_string("it's C:\\x") == "'it\\'s C:\\\\x'"
    assert spark_literal("a'b") == "'a\\'b'"
    assert spark_literal(date(2026, 1, 2)) == "DATE'2026-01-02'"
    assert spark_literal(7) == "7"


def test_standard_and_postgres_quoting_double_the_quote():
    assert standard_string("it's") == "'it''s'"
    assert pg_identifier("My Schema", 'ta"ble') == '"My Schema"."ta""ble"'
    assert pg_identifier("lakehouse") == '"lakehouse"'


@pytest.mark.spark
def test_spark_reads_its_literals_back(spark):
    texts = ["plain", "it's", "back\\slash", "both\\'"]
    [row] = spark.sql("SELECT " + ", ".join(f"{spark_string(t)} AS c{i}"
                                            for i, t in enumerate(texts))).collect()
    assert list(row) == texts
