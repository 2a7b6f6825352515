"""Which reports a `lakehouse run` pass refreshes (pipelines.gold.due): pure, over report
files in tmp_path; the loop itself runs in tests/end_to_end/test_end_to_end.py."""

from __future__ import annotations

from pathlib import Path

from pipelines.gold.build import ReportRun
from pipelines.gold.definitions import ReportSet, load_reports
from pipelines.gold.due import DueReports

REPORTS = {
    "users_count": "SELECT count(*) AS n FROM lakehouse_silver.users",
    "orders_count": "SELECT count(*) AS n FROM lakehouse_silver.sales_orders",
    "both": "SELECT u.n + o.n AS n FROM lakehouse_gold.users_count u "
            "CROSS JOIN lakehouse_gold.orders_count o",
    "per_user": "SELECT u.id, count(*) AS n FROM lakehouse_silver.users u "
                "JOIN lakehouse_silver.sales_orders o ON o.user_id = u.id GROUP BY u.id",
}


def reports(directory: Path, **edited: str) -> ReportSet:
    directory.mkdir(exist_ok=True)
    for name, sql in {**REPORTS, **edited}.items():
        (directory / f"{name}.sql").write_text(sql)
    return load_reports(directory, "lakehouse_silver", "lakehouse_gold")


def ran(names, failed=(), skipped=()) -> list[ReportRun]:
    return [ReportRun(n, f"gold/{n}", error="bad" if n in failed else None,
                      skipped="missing" if n in skipped else None) for n in names]


def test_a_pass_refreshes_the_reports_whose_inputs_changed(tmp_path):
    defined, due = reports(tmp_path / "gold"), DueReports()
    first = due.select(defined, ["public.users"])
    assert set(first) == set(REPORTS)  # nothing refreshed in this process yet
    assert first.index("both") > first.index("users_count")  # dependency order
    due.refreshed(defined, ran(first))

    assert due.select(defined, []) == ()
    # a report that reads a changed report is due with it; a silver table of another
    # schema has the name analysts give it (sales.orders: sales_orders)
    assert set(due.select(defined, ["public.users"])) == {"users_count", "both", "per_user"}
    assert set(due.select(defined, ["sales.orders"])) == {"orders_count", "both", "per_user"}
    assert due.select(defined, ["public.projects"]) == ()


def test_a_failed_skipped_or_edited_report_is_due_until_it_is_refreshed(tmp_path):
    defined, due = reports(tmp_path / "gold"), DueReports()
    due.refreshed(defined, ran(defined.names, failed={"users_count"},
                               skipped={"orders_count"}))
    assert set(due.select(defined, [])) == {"users_count", "orders_count", "both"}

    due.refreshed(defined, ran(["users_count", "orders_count", "both"]))
    assert due.select(defined, []) == ()
    edited = reports(tmp_path / "gold", per_user=REPORTS["per_user"] + " HAVING count(*) > 1")
    assert due.select(edited, []) == ("per_user",)


def test_reports_read_again_unchanged_are_not_due(demo_reports):
    """Each pass reads the directory again: the same files, incremental ones included, are
    the same definitions."""
    due = DueReports()
    due.refreshed(demo_reports, ran(demo_reports.names))
    again = load_reports(demo_reports.directory, "lakehouse_silver", "lakehouse_gold")
    assert any(r.incremental for r in again.reports)
    assert due.select(again, []) == ()
