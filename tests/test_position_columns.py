"""The engine's twins of the position order and number agree with Python's, on both
engines: every pair of a small grid of positions, compared as Columns, as SQL text and
as DECIMAL(38,0) numbers."""

from __future__ import annotations

import itertools
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from pipelines.position_columns import (
    is_after, is_after_position, is_before_position, is_within, number_column, number_literal,
    sql_before, sql_is_after, sql_number)
from pipelines.positions import position_number

pytestmark = pytest.mark.spark

GRID = [(5, 0), (5, 3), (6, 0), (2**62, 2), (2**63 - 1, 9_999_999_999)]
PAIRS = list(itertools.product(GRID, GRID))


def test_columns_and_sql_order_positions_as_python_does(spark):
    rows = spark.createDataFrame([(a[0], a[1], b[0], b[1]) for a, b in PAIRS],
                                 "lsn long, ci long, than_lsn long, than_ci long")
    got = rows.select(
        is_after(F.col("lsn"), F.col("ci"), F.col("than_lsn"), F.col("than_ci")).alias("after"),
        F.expr(sql_is_after("lsn", "ci", "than_lsn", "than_ci")).alias("sql_after"),
        "lsn", "ci", "than_lsn", "than_ci").collect()
    for row in got:
        expected = (row.lsn, row.ci) > (row.than_lsn, row.than_ci)
        assert (row.after, row.sql_after) == (expected, expected), row


@pytest.mark.parametrize("position", [GRID[1], GRID[3]])
def test_literal_comparisons_match_tuples(spark, position):
    rows = spark.createDataFrame(GRID, "lsn long, ci long")
    lsn, ci = F.col("lsn"), F.col("ci")
    got = rows.select(
        "lsn", "ci", is_after_position(lsn, ci, position).alias("after"),
        is_before_position(lsn, ci, position).alias("before"),
        is_before_position(lsn, ci, position, inclusive=True).alias("at_or_before"),
        F.expr(sql_before("lsn", "ci", position)).alias("sql_before"),
        F.expr(sql_before("lsn", "ci", position, inclusive=True)).alias("sql_at_or_before"),
        is_within(lsn, ci, GRID[0], position).alias("within")).collect()
    for row in got:
        at = (row.lsn, row.ci)
        assert (row.after, row.before, row.at_or_before, row.sql_before, row.sql_at_or_before,
                row.within) == (at > position, at < position, at <= position, at < position,
                                at <= position, GRID[0] < at <= position), row


def test_numbers_in_the_engine_equal_python_s(spark):
    rows = spark.createDataFrame(GRID, "lsn long, ci long")
    got = rows.select("lsn", "ci", number_column(F.col("lsn"), F.col("ci")).alias("n")).collect()
    assert {(r.lsn, r.ci): r.n for r in got} == {p: Decimal(position_number(p)) for p in GRID}
    [row] = spark.range(1).select(number_literal(GRID[4]).alias("lit"),
                                  F.expr(sql_number(GRID[4])).alias("sql")).collect()
    assert row.lit == row.sql == Decimal(position_number(GRID[4]))
