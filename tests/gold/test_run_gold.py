"""run_gold and `lakehouse gold` on real Delta tables under tmp_path, on Sail and on
classic Spark with delta-spark; the test marked BOTH_LAYOUTS also with silver and gold
tables by catalog names (tests/gold/test_run_gold_unity_catalog.py has what only a catalog
has)."""

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from pipelines.catalog import TableNames, save_table, table_exists
from pipelines.cli import main
from pipelines.gold.display import format_gold_reports
from pipelines.gold.io import TableGoldIO
from pipelines.config import load_config
from pipelines.gold import run as gold_run
from pipelines.gold.definitions import load_reports
from pipelines.gold.run import run_configured_gold, run_gold
from pipelines.lake import Lake
from pipelines.spark_jobs import counted_jobs
from tests.support.gold_rows import demo_gold_config, write_silver
from tests.support.layouts import BOTH_LAYOUTS

pytestmark = pytest.mark.spark


def gold_rows(spark, layout: Lake, names) -> dict:
    return {name: sorted(tuple(r) for r in
                         spark.read.format("delta").load(str(layout.gold(name))).collect())
            for name in names}


def gold_io(spark, layout: Lake) -> TableGoldIO:
    return TableGoldIO(spark, TableNames(layout))


def test_run_gold_writes_every_report_and_a_rerun_is_identical(
        spark, make_silver_frame, silver_rows, expected_reports, demo_reports, tmp_path):
    layout = Lake.of(tmp_path / "lake")
    write_silver(spark, make_silver_frame, TableNames(layout), silver_rows)
    io = gold_io(spark, layout)

    first = run_gold(spark, io, demo_reports)
    assert first.rows == {name: len(rows) for name, rows in expected_reports.items()}
    assert not first.skipped
    for report in demo_reports.reports:
        gold = spark.read.format("delta").load(str(layout.gold(report.name)))
        declared = ",".join(f"{column}:{type_}" for column, type_ in report.columns)
        assert gold.schema.simpleString() == f"struct<{declared}>"
        ddl = ", ".join(f"{column} {type_}" for column, type_ in report.columns)
        assert_df_equality(gold, spark.createDataFrame(expected_reports[report.name], ddl),
                           ignore_row_order=True, ignore_nullable=True)
    before = gold_rows(spark, layout, demo_reports.names)

    second = run_gold(spark, io, demo_reports)
    assert second.rows == first.rows
    assert gold_rows(spark, layout, demo_reports.names) == before
    assert {DeltaTable(str(layout.gold(n))).version() for n in demo_reports.names} == {1}

    shown = format_gold_reports(spark, io, demo_reports, ["hours_per_user_per_week"], limit=2)
    assert shown.splitlines()[:4] == [
        "== hours_per_user_per_week: hours of finished time entries per user per ISO week (UTC)",
        "iso_year | iso_week | week_start | user_id | email           | full_name | entries |  hours",
        "---------+----------+------------+---------+-----------------+-----------+---------+-------",
        "    2027 |        1 | 2027-01-04 |       1 | ana@example.com | Ana       |       1 | 1.0000",
    ]


def missing_tables(line: str) -> list[str]:
    """The tables a skipped report's line names, sorted."""
    return sorted(line.removeprefix("skipped, table(s) not found: ").split(" (run")[0]
                  .split(", "))


@BOTH_LAYOUTS
def test_gold_verb_builds_what_it_can_and_names_missing_silver(
        spark, make_silver_frame, expected_reports, demo_reports, tmp_path, layout, monkeypatch,
        capsys):
    config = demo_gold_config(tmp_path, layout)
    loaded = load_config(config, environ={})
    names = TableNames.from_config(loaded)
    silver, gold = loaded.databricks.silver_schema, loaded.databricks.gold_schema
    write_silver(spark, make_silver_frame, names, ["time_entries", "users"])
    monkeypatch.delenv("LAKEHOUSE_SOURCE_DSN", raising=False)
    monkeypatch.setattr("pipelines.engine.get_spark", lambda config: spark)

    # a report reading another report that was not asked for names that one too
    assert main(["--config", str(config), "gold", "--report", "hours_per_project_per_day",
                 "active_users_per_day"]) == 2
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert missing_tables(lines["hours_per_project_per_day"]) == sorted([
        f"{silver}.clients", f"{silver}.projects", f"{gold}.finished_entries_per_day"])
    assert lines["active_users_per_day"].startswith("11 rows in ")
    assert not table_exists(spark, names.gold("hours_per_project_per_day"))

    assert main(["--config", str(config), "gold"]) == 2
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert list(lines) == list(demo_reports.names)
    for name in ("hours_per_project_per_day", "billable_per_client_per_month"):
        assert missing_tables(lines[name]) == [f"{silver}.clients", f"{silver}.projects"]
    assert lines["active_users_per_day"].startswith(
        f"{len(expected_reports['active_users_per_day'])} rows in ")
    assert lines["active_users_per_day"].endswith(f" -> {names.gold('active_users_per_day')}")
    assert not table_exists(spark, names.gold("hours_per_project_per_day"))

    assert main(["--config", str(config), "gold", "--report", "hours_per_user_per_week"]) == 0
    assert capsys.readouterr().out.startswith(
        f"hours_per_user_per_week: {len(expected_reports['hours_per_user_per_week'])} rows in ")

    assert main(["--config", str(config), "gold", "--report", "nope"]) == 2
    assert "unknown gold report(s) nope" in capsys.readouterr().err


def test_no_reports_configured_means_no_gold(tmp_path, monkeypatch, capsys):
    config = tmp_path / "lakehouse.yml"
    config.write_text(f"source: {{dsn: 'host=nowhere'}}\nlake: {{path: '{tmp_path}/lake'}}\n")
    monkeypatch.delenv("LAKEHOUSE_SOURCE_DSN", raising=False)
    assert main(["--config", str(config), "gold"]) == 0
    assert capsys.readouterr().out.startswith("no gold reports configured")
    # `lakehouse run`'s gold step: nothing, not even a session
    assert run_configured_gold(None, load_config(config, environ={})) is None


def test_a_report_skipped_again_and_again_is_warned_about_once(spark, demo_reports, tmp_path,
                                                                caplog, monkeypatch):
    monkeypatch.setattr(gold_run, "_LOGGED", set())  # nothing an earlier test logged
    io = gold_io(spark, Lake.of(tmp_path / "lake"))
    for _ in range(3):  # as `lakehouse run` does, a pass every second or so
        report = run_gold(spark, io, demo_reports, ["hours_per_project_per_day"])
        assert [r.report for r in report.skipped] == ["hours_per_project_per_day"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("gold hours_per_project_per_day skipped")


def test_reports_run_at_once_each_after_the_reports_it_reads(spark, make_silver_frame, tmp_path,
                                                           caplog):
    """gold.parallel_reports: independent reports in threads of their own; a report waits
    for the reports it reads (built from their new table, or skipped when one failed)."""
    directory = tmp_path / "reports"
    directory.mkdir()
    for name, sql in {"a_broken": "SELECT id, nme FROM lakehouse_silver.clients",
                      "b_reads_broken": "SELECT * FROM lakehouse_gold.a_broken",
                      "c_clients": "SELECT id, name FROM lakehouse_silver.clients",
                      "d_reads_clients": "SELECT count(*) AS n FROM lakehouse_gold.c_clients",
                      }.items():
        (directory / f"{name}.sql").write_text(sql)
    reports = load_reports(directory, "lakehouse_silver", "lakehouse_gold")
    layout = Lake.of(tmp_path / "lake")
    write_silver(spark, make_silver_frame, TableNames(layout), ["clients"])
    caplog.set_level("INFO", logger="pipelines.gold")

    result = run_gold(spark, gold_io(spark, layout), reports, parallel=2)
    runs = {run.report: run for run in result.runs}
    assert list(runs) == list(reports.names)  # in dependency order, as they were taken
    assert "the engine rejects the query" in runs["a_broken"].error
    assert runs["b_reads_broken"].skipped == "it reads a_broken, skipped in this run"
    clients = runs["c_clients"].rows
    assert clients == make_silver_frame("clients").count() > 0
    # c's table did not exist before this run: d saw it only because it waited for c
    assert gold_rows(spark, layout, ["d_reads_clients"]) == {"d_reads_clients": [(clients,)]}
    threads = {r.threadName for r in caplog.records if r.name.startswith("pipelines.gold")}
    assert len(threads) == 2 and all(t.startswith("gold") for t in threads)



WHOLE_BUILD_JOBS = 6  # classic Spark, the suite's settings: one rebuild of one report


def test_a_whole_rebuild_computes_the_report_once(engine, spark, make_silver_frame, silver_rows,
                                                  expected_reports, demo_reports, tmp_path):
    """The check rides in the write (a misfit fails it before its commit) and the rows are
    counted from the new version: the report's query runs once. Classic Spark's jobs are a
    fixed toll per query, so they are pinned (a count is exact)."""
    if engine != "spark":
        pytest.skip("Spark Connect (Sail) has no job tracker; the Spark pass runs this")
    layout = Lake.of(tmp_path / "lake")
    write_silver(spark, make_silver_frame, TableNames(layout), silver_rows)
    io, report = gold_io(spark, layout), ["hours_per_user_per_week"]  # not incremental
    run_gold(spark, io, demo_reports)
    with counted_jobs(spark) as rebuild:
        again = run_gold(spark, io, demo_reports, report)
    assert again.rows == {"hours_per_user_per_week":
                          len(expected_reports["hours_per_user_per_week"])}
    assert rebuild.jobs == WHOLE_BUILD_JOBS


def test_a_value_that_no_longer_fits_keeps_the_report_s_last_version(spark, tmp_path):
    layout = Lake.of(tmp_path / "lake")
    items = TableNames(layout).silver("public", "items")
    save_table(spark.createDataFrame([(1,), (2,)], "id int").write.format("delta"), items)
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "ids.sql").write_text(
        "-- columns: id tinyint\nSELECT id * 50 AS id FROM lakehouse_silver.items")
    reports, io = load_reports(tmp_path / "gold", "lakehouse_silver", "lakehouse_gold"), \
        gold_io(spark, layout)
    assert run_gold(spark, io, reports).rows == {"ids": 2}

    save_table(spark.createDataFrame([(3,), (4,)], "id int").write.format("delta")
               .mode("append"), items)  # 150 and 200 do not fit a tinyint
    failed = run_gold(spark, io, reports).failed
    assert [(r.report, r.exit_code) for r in failed] == [("ids", 4)]
    assert "values do not fit the declared schema (id -> tinyint: 2 value(s))" in failed[0].error
    assert DeltaTable(str(layout.gold("ids"))).version() == 0
    assert gold_rows(spark, layout, ["ids"]) == {"ids": [(50,), (100,)]}
