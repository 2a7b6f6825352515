"""`lakehouse gold` with engine databricks, run on Sail and classic Spark: silver views
come from catalog tables `<catalog>`.`<silver_schema>`.`<table>`, reports are replaced
with saveAsTable in `<catalog>`.`<gold_schema>`.`<report>` (the schema is created when
missing). The same GoldIO runs on Databricks against Unity Catalog; here it runs on the
session's own catalog. tests/gold/test_run_gold.py runs its BOTH_LAYOUTS test with catalog
tables too (tests/support/layouts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from pipelines.catalog import TableNames, qualified
from pipelines.cli import main
from pipelines.config import load_config
from pipelines.gold.definitions import configured_reports
from pipelines.gold.display import format_gold_reports
from pipelines.gold.io import gold_io_for
from tests.support.gold_rows import META, demo_gold_config, silver_frame, ts, write_silver

pytestmark = pytest.mark.spark


@pytest.fixture
def config_file(spark, tmp_path, unity_catalog, monkeypatch):
    """A databricks config whose catalog is the session's own, with fresh schemas (the
    gold schema's name needs quoting on Sail)."""
    monkeypatch.delenv("LAKEHOUSE_SOURCE_DSN", raising=False)
    monkeypatch.setattr("pipelines.engine.get_spark", lambda config: spark)
    return demo_gold_config(tmp_path, unity_catalog)


def test_gold_verb_reads_and_writes_catalog_tables(spark, make_silver_frame, silver_rows,
                                                   expected_reports, config_file, capsys):
    config = load_config(config_file, environ={})
    names = TableNames.from_config(config)
    write_silver(spark, make_silver_frame, names, silver_rows)
    gold_schema = qualified(names.gold("x").namespace)
    assert not spark.catalog.databaseExists(gold_schema)

    reports = configured_reports(config)
    assert main(["--config", str(config_file), "gold"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines] == list(reports.names)
    for line, report in zip(lines, reports.reports):
        name = report.name
        assert line.endswith(f" -> {names.gold(name)}")  # quoted where a part needs it
        gold = spark.table(names.gold(name).sql)
        declared = ",".join(f"{column}:{type_}" for column, type_ in report.columns)
        assert gold.schema.simpleString() == f"struct<{declared}>"
        ddl = ", ".join(f"{column} {type_}" for column, type_ in report.columns)
        assert_df_equality(gold, spark.createDataFrame(expected_reports[name], ddl),
                           ignore_row_order=True, ignore_nullable=True)
    assert not Path(config.lake.path, "gold").exists()

    before = {n: sorted(tuple(r) for r in spark.table(names.gold(n).sql).collect())
              for n in reports.names}
    assert main(["--config", str(config_file), "gold"]) == 0  # replaced, same rows
    assert {n: sorted(tuple(r) for r in spark.table(names.gold(n).sql).collect())
            for n in reports.names} == before
    shown = format_gold_reports(spark, gold_io_for(config, spark), reports,
                                ["active_users_per_day"], limit=1)
    assert shown.splitlines()[1:4] == ["day        | active_users", "-----------+-------------",
                                       "2027-01-04 |            1"]


def test_an_incremental_report_replaces_its_groups_in_the_catalog_table(
        spark, make_silver_frame, silver_rows, config_file, capsys):
    """Silver in the catalog, its tombstones in the lake (as on Databricks): the second
    refresh replaces the two days an updated entry left and joined, by replaceWhere on
    the catalog table."""
    config = load_config(config_file, environ={})
    names = TableNames.from_config(config)
    write_silver(spark, make_silver_frame, names, ["time_entries"])
    marks = names.tombstones("public", "time_entries")
    spark.createDataFrame([], f"id string, {META}").write.format("delta").save(marks.path.uri)
    command = ["--config", str(config_file), "gold", "--report", "finished_entries_per_day"]
    assert main(command) == 0
    assert " in 1 group(s) " not in capsys.readouterr().out  # the first build is whole

    rows = [row if row[0] != "e01" else row[:3] + (ts("2026-03-05 09:00:00"),
                                                    ts("2026-03-05 10:30:00")) + row[5:]
            for row in silver_rows["time_entries"]]
    moved = silver_frame(spark, "time_entries", rows).withColumn(
        "_lsn", F.when(F.col("id") == "e01", F.lit(5000)).otherwise(F.col("_lsn")))
    moved.write.format("delta").mode("overwrite").saveAsTable(
        names.silver("public", "time_entries").sql)
    assert main(command) == 0
    assert " in 2 group(s) " in capsys.readouterr().out  # 2026-03-02 and 2026-03-05
    gold = {(r.day.isoformat(), r.project_id): r.entries
            for r in spark.table(names.gold("finished_entries_per_day").sql).collect()
            if r.user_id == 1}
    assert gold[("2026-03-02", 100)] == 1 and gold[("2026-03-05", 100)] == 2
