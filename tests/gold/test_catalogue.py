"""The report catalogue: SQL files and declared inputs agree (no Spark)."""

import re

import pytest

from pipelines.gold.reports import REPORT_NAMES, REPORTS, SILVER_VIEWS, select_reports


@pytest.mark.parametrize("name", REPORT_NAMES)
def test_sql_reads_exactly_the_declared_silver_views(name):
    spec = REPORTS[name]
    sql = re.sub(r"--[^\n]*", "", spec.sql())  # comments mention other reports
    read = {m for m in re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", sql, re.IGNORECASE)}
    assert read & set(SILVER_VIEWS) == set(spec.tables)
    assert not sql.rstrip().endswith(";")


def test_select_reports():
    assert [s.name for s in select_reports()] == list(REPORT_NAMES)
    picked = select_reports(["active_users_per_day", "hours_per_project_per_day",
                             "active_users_per_day"])
    assert [s.name for s in picked] == ["hours_per_project_per_day", "active_users_per_day"]
    with pytest.raises(ValueError, match="unknown gold report.*nope"):
        select_reports(["nope"])
