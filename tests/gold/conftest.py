"""Fixtures for the gold tests: the silver rows of tests/support/gold_rows.py, what the
reports say about them, and the demo's report set."""

from __future__ import annotations

import pytest

from pipelines.demo.run import DEMO_REPORTS
from pipelines.gold.definitions import ReportSet, load_reports
from tests.support.gold_rows import EXPECTED, SILVER_ROWS, SILVER_VIEWS, silver_frame


@pytest.fixture(scope="session")
def expected_reports() -> dict:
    """Each report's rows for SILVER_ROWS, in declared column order."""
    return EXPECTED


@pytest.fixture(scope="session")
def silver_rows() -> dict:
    """Rows per silver table (without the metadata columns)."""
    return SILVER_ROWS


@pytest.fixture(scope="session")
def make_silver_frame(spark):
    """silver_frame(table) bound to the session."""
    return lambda table: silver_frame(spark, table)


@pytest.fixture(scope="session")
def demo_reports() -> ReportSet:
    """The demo's report directory, read as `lakehouse gold` reads it."""
    return load_reports(DEMO_REPORTS, "lakehouse_silver", "lakehouse_gold")


@pytest.fixture(scope="session")
def silver_views(spark):
    """The views run_gold registers for the silver tables (SILVER_VIEWS), over
    SILVER_ROWS."""
    for (_, table), view in SILVER_VIEWS.items():
        silver_frame(spark, table).createOrReplaceTempView(view)
    return spark
