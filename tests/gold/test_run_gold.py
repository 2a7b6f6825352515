"""run_gold and `lakehouse gold` on real Delta tables under tmp_path, on Sail and on
classic Spark with delta-spark."""

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from pipelines.cli import main
from pipelines.gold.display import format_gold_reports
from pipelines.gold.reports import REPORT_NAMES, REPORTS
from pipelines.gold.run import run_gold
from pipelines.lake import Lake

pytestmark = pytest.mark.spark


def write_silver(make_silver_frame, layout: Lake, tables) -> None:
    for table in tables:
        make_silver_frame(table).write.format("delta").save(str(layout.silver("public", table)))


def gold_rows(spark, layout: Lake) -> dict:
    return {name: sorted(tuple(r) for r in
                         spark.read.format("delta").load(str(layout.gold(name))).collect())
            for name in REPORT_NAMES}


def test_run_gold_writes_every_report_and_a_rerun_is_identical(
        spark, make_silver_frame, silver_rows, expected_reports, tmp_path):
    layout = Lake.of(tmp_path / "lake")
    write_silver(make_silver_frame, layout, silver_rows)

    first = run_gold(spark, layout)
    assert first.rows == {name: len(rows) for name, rows in expected_reports.items()}
    assert not first.skipped
    for name in REPORT_NAMES:
        spec = REPORTS[name]
        gold = spark.read.format("delta").load(str(layout.gold(name)))
        declared = ",".join(f"{column}:{type_}" for column, type_ in spec.columns)
        assert gold.schema.simpleString() == f"struct<{declared}>"
        assert_df_equality(gold, spark.createDataFrame(expected_reports[name], spec.ddl),
                           ignore_row_order=True, ignore_nullable=True)
    before = gold_rows(spark, layout)

    second = run_gold(spark, layout)
    assert second.rows == first.rows
    assert gold_rows(spark, layout) == before
    assert {DeltaTable(str(layout.gold(n))).version() for n in REPORT_NAMES} == {1}

    shown = format_gold_reports(spark, layout, ["hours_per_user_per_week"], limit=2)
    assert shown.splitlines()[:4] == [
        "== hours_per_user_per_week: hours of finished time entries per user per ISO week (UTC)",
        "iso_year | iso_week | week_start | user_id | email           | full_name | entries |  hours",
        "---------+----------+------------+---------+-----------------+-----------+---------+-------",
        "    2027 |        1 | 2027-01-04 |       1 | ana@example.com | Ana       |       1 | 1.0000",
    ]


def test_gold_verb_builds_what_it_can_and_names_missing_silver(
        spark, make_silver_frame, expected_reports, tmp_path, monkeypatch, capsys):
    layout = Lake.of(tmp_path / "lake")
    write_silver(make_silver_frame, layout, ["time_entries", "users"])
    config = tmp_path / "lakehouse.yml"
    config.write_text(f"source: {{dsn: 'host=nowhere'}}\nlake: {{path: '{layout.root}'}}\n")
    monkeypatch.delenv("LAKEHOUSE_SOURCE_DSN", raising=False)
    monkeypatch.setattr("pipelines.engine.get_spark", lambda config: spark)

    assert main(["--config", str(config), "gold"]) == 0  # a source without those tables
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert list(lines) == list(REPORT_NAMES)
    for name in ("hours_per_project_per_day", "billable_per_client_per_month"):
        assert lines[name] == (
            f"skipped, silver table(s) not found: {layout.silver('public', 'projects')}, "
            f"{layout.silver('public', 'clients')} (run `lakehouse silver` first)")
    assert lines["active_users_per_day"].startswith(
        f"{len(expected_reports['active_users_per_day'])} rows in ")
    assert lines["active_users_per_day"].endswith(f" -> {layout.gold('active_users_per_day')}")
    assert not layout.gold("hours_per_project_per_day").exists()

    assert main(["--config", str(config), "gold", "--report", "hours_per_project_per_day"]) == 2
    assert "skipped, silver table(s) not found" in capsys.readouterr().out  # asked for by name

    assert main(["--config", str(config), "gold", "--report", "hours_per_user_per_week"]) == 0
    assert capsys.readouterr().out.startswith(
        f"hours_per_user_per_week: {len(expected_reports['hours_per_user_per_week'])} rows in ")


def test_a_report_skipped_again_and_again_is_warned_about_once(spark, tmp_path, caplog):
    layout = Lake.of(tmp_path / "lake")
    for _ in range(3):  # as `lakehouse run` does, a pass every second or so
        report = run_gold(spark, layout, ["hours_per_project_per_day"])
        assert [r.report for r in report.skipped] == ["hours_per_project_per_day"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("gold hours_per_project_per_day skipped")
