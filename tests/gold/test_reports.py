"""The report math, on classic PySpark and on Sail (silver rows and expectations:
tests/support/gold_rows.py)."""

import datetime as dt
from decimal import Decimal as D

import pytest
from chispa import assert_df_equality

from pipelines.demo.run import DEMO_REPORTS
from pipelines.errors import ConfigError, DataError
from pipelines.gold.conform import conform_to_schema, validated_row_count
from pipelines.gold.display import format_report
from pipelines.gold.io import view_name
from pipelines.gold.build import build_report
from tests.support.gold_rows import SILVER_VIEWS

pytestmark = pytest.mark.spark


@pytest.fixture
def far_east(silver_views):
    """The session time zone set to Asia/Tokyo (UTC+9) for one test, then back to UTC.

    Reports must use UTC days whatever the session says (a Databricks cluster may run in
    another zone): with to_date() e02 (23:30 UTC) and e09 (22:00 UTC, ISO 2026-W53) would
    move to the next day, and e09 into 2027-W01, on classic Spark.
    """
    key = "spark.sql.session.timeZone"
    silver_views.conf.set(key, "Asia/Tokyo")
    yield silver_views
    silver_views.conf.set(key, "UTC")


@pytest.mark.parametrize("name", sorted(p.stem for p in DEMO_REPORTS.glob("*.sql")))
def test_report_math(far_east, demo_reports, expected_reports, name):
    views = dict(SILVER_VIEWS)
    for report in demo_reports.reports:  # dependency order: the reports it reads first
        actual = conform_to_schema(build_report(far_east, report, views), report.columns)
        if report.name == name:
            break
        views[("lakehouse_gold", report.name)] = view_name("gold", report.name)
        actual.createOrReplaceTempView(view_name("gold", report.name))
    ddl = ", ".join(f"{column} {type_}" for column, type_ in report.columns)
    expected = far_east.createDataFrame(expected_reports[name], ddl)
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_expected_iso_weeks_agree_with_python(expected_reports):
    for iso_year, iso_week, week_start, *_ in expected_reports["hours_per_user_per_week"]:
        assert week_start.isocalendar()[:3] == (iso_year, iso_week, 1)


def test_a_value_that_does_not_fit_its_declared_type_fails_loudly(spark):
    columns = (("day", "date"), ("amount", "decimal(20,2)"))
    fits = spark.createDataFrame([(dt.date(2026, 1, 1), D("99999999999999999.99"))],
                                 "day date, amount decimal(30,2)")
    assert validated_row_count(fits, columns, "r") == 1
    too_big = spark.createDataFrame([(dt.date(2026, 1, 1), D("1000000000000000000.00")),
                                     (None, None)], "day date, amount decimal(30,2)")
    with pytest.raises(DataError, match=r"gold report r: .*amount -> decimal\(20,2\): 1 value"):
        validated_row_count(too_big, columns, "r")
    with pytest.raises(ConfigError, match=r"the query's columns \(day, amt\) are not the "
                       r"declared ones \(day, amount\)"):
        conform_to_schema(fits.withColumnRenamed("amount", "amt"), columns)


def test_format_report(spark):
    df = spark.createDataFrame([(dt.date(2026, 3, 2), "Website", D("3.0000")),
                                (dt.date(2026, 3, 3), None, D("12.5000")),
                                (dt.date(2026, 3, 4), "x", D("0.0003"))],
                               "day date, project string, hours decimal(18,4)").orderBy("day")
    assert format_report(df, limit=2) == (
        "day        | project |   hours\n"
        "-----------+---------+--------\n"
        "2026-03-02 | Website |  3.0000\n"
        "2026-03-03 | NULL    | 12.5000\n"
        "(first 2 rows)")
    assert format_report(df.limit(0)) == "day | project | hours\n----+---------+------\n(no rows)"
