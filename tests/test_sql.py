"""`lakehouse sql`: the lake's silver and gold tables by analysts' names on the configured
engine, each output format byte for byte, the engine's message for a bad query, and a
Spark Connect endpoint that a separate client process queries."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import psycopg
import pytest
import yaml

from pipelines.embedded_pg import free_port
from pipelines.engine import engine_message
from pipelines.errors import ConfigError
from pipelines.lake import Lake, read_delta
from pipelines.sql.command import query_text, run_query
from pipelines.sql.output import csv_chunks, json_chunks, markdown_chunks, table_chunks
from tests.support.cli import lakehouse, start_lakehouse
from tests.support.demo import change_after_snapshot, demo_lake
from tests.support.engines import CLASSIC_TEST_CONF
from tests.support.postgres import fresh_database

# one worker builds the module's lake (`built`) for every test that reads it
pytestmark = pytest.mark.xdist_group("sql")

COLUMNS = ["id", "name", "hours", "ratio", "day", "at", "note"]
ROWS = [
    (1, "Ada", Decimal("12.5000"), 0.25, dt.date(2026, 1, 5),
     dt.datetime(2026, 1, 5, 9, 30), None),
    (22, 'say "hi", | bye', Decimal("-3.0000"), None, None, None, True),
]


def text(chunks, rows) -> str:
    """A format's whole output; rows arrive as a generator, as the engine streams them."""
    return "".join(chunks(COLUMNS, (row for row in rows)))


def test_the_table_format_is_aligned_with_numbers_right_and_a_row_count():
    assert text(table_chunks, ROWS) == (
        "id | name            |   hours | ratio | day        | at                  | note\n"
        "---+-----------------+---------+-------+------------+---------------------+-----\n"
        " 1 | Ada             | 12.5000 |  0.25 | 2026-01-05 | 2026-01-05T09:30:00 | NULL\n"
        "22 | say \"hi\", | bye | -3.0000 |  NULL | NULL       | NULL                | True\n"
        "(2 rows)\n")


def test_csv_quotes_what_needs_it_and_leaves_null_empty():
    assert text(csv_chunks, ROWS) == (
        "id,name,hours,ratio,day,at,note\n"
        "1,Ada,12.5000,0.25,2026-01-05,2026-01-05T09:30:00,\n"
        '22,"say ""hi"", | bye",-3.0000,,,,True\n')
    assert "".join(csv_chunks(["tags"], [(["a", "b"],)])) == 'tags\n"[""a"",""b""]"\n'


def test_json_keeps_numbers_and_every_decimal_digit():
    output = text(json_chunks, ROWS)
    assert output == (
        '[{"id":1,"name":"Ada","hours":12.5000,"ratio":0.25,"day":"2026-01-05",'
        '"at":"2026-01-05T09:30:00","note":null},\n'
        '{"id":22,"name":"say \\"hi\\", | bye","hours":-3.0000,"ratio":null,"day":null,'
        '"at":null,"note":true}]\n')
    assert json.loads(output, parse_float=Decimal)[0]["hours"] == Decimal("12.5000")
    assert text(json_chunks, []) == "[]\n"


def test_markdown_escapes_pipes_and_right_aligns_numeric_columns():
    assert text(markdown_chunks, ROWS) == (
        "| id | name | hours | ratio | day | at | note |\n"
        "|---:|---|---:|---:|---|---|---|\n"
        "| 1 | Ada | 12.5000 | 0.25 | 2026-01-05 | 2026-01-05T09:30:00 | NULL |\n"
        '| 22 | say "hi", \\| bye | -3.0000 | NULL | NULL | NULL | True |\n')


def test_the_query_comes_from_the_argument_a_file_or_stdin(tmp_path, monkeypatch):
    assert query_text("SELECT 1;\n", None) == "SELECT 1"
    file = tmp_path / "q.sql"
    file.write_text("-- weekly\nSELECT 2 ;  \n")
    assert query_text(None, file) == "-- weekly\nSELECT 2"
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT 3"))
    assert query_text(None, None) == "SELECT 3"
    for query, path, message in (("SELECT 1", file, "not both"), (" ; ", None, "empty"),
                                 (None, tmp_path / "missing.sql", "cannot read")):
        with pytest.raises(ConfigError, match=message):
            query_text(query, path)


def test_the_engine_message_stops_before_the_plan_and_the_jvm_stack():
    error = Exception("[UNRESOLVED_COLUMN] `nope` cannot be resolved.; line 1 pos 7;\n"
                      "'Project ['nope]\n+- 'UnresolvedRelation [users]\n\n"
                      "JVM stacktrace:\norg.apache.spark...")
    assert engine_message(error) == "[UNRESOLVED_COLUMN] `nope` cannot be resolved.; line 1 pos 7;"


@pytest.mark.spark
def test_tables_stop_at_the_limit_and_csv_streams_every_row(spark, capsys):
    query = "SELECT id, id * 2 AS twice FROM range(5) ORDER BY id"
    run_query(spark, query, "table", 3, sys.stdout)
    table = capsys.readouterr()
    run_query(spark, query, "csv", 3, sys.stdout)

    assert table.out.splitlines()[2:] == [" 0 |     0", " 1 |     2", " 2 |     4", "(3 rows)"]
    assert "the first 3 rows" in table.err
    assert capsys.readouterr().out == "id,twice\n0,0\n1,2\n2,4\n3,6\n4,8\n"
    with pytest.raises(ConfigError, match="the query failed"):
        run_query(spark, "SELECT nope", "csv", 3, sys.stdout)


# --- on a lake built by the pipeline's verbs ---------------------------------------------

@pytest.fixture(scope="module")
def built(pg_server, tmp_path_factory):
    """A lake with the demo's silver tables and gold reports (built on Sail, which is
    faster; the engine under test only reads it), and its source database."""
    workdir = tmp_path_factory.mktemp("sql")
    with fresh_database(pg_server) as dsn:
        demo_lake(dsn, workdir, after_backfill=change_after_snapshot, gold=True)
        yield dsn, workdir


@pytest.fixture
def sql_config(built, config_engine: str) -> Path:
    """The lake's config for the engine under test."""
    dsn, workdir = built
    config = workdir / f"{config_engine}.yml"
    settings = {"source": {"dsn": dsn}, "lake": {"path": str(workdir / "lake")},
                "engine": config_engine}
    if config_engine == "spark":
        settings["spark"] = {"conf": CLASSIC_TEST_CONF}
    config.write_text(yaml.safe_dump(settings))
    return config


ENTRIES_PER_USER = ("SELECT u.email, count(*) AS entries FROM {users} u JOIN {entries} t "
                    "ON t.user_id = u.id GROUP BY u.email ORDER BY u.email")
WEEKS_WITH_NAMES = (
    "SELECT g.iso_year, g.iso_week, g.user_id, u.full_name, g.hours "
    "FROM lakehouse_gold.hours_per_user_per_week g "
    "JOIN lakehouse_silver.users u ON u.id = g.user_id ORDER BY 1, 2, 3")


@pytest.mark.spark
def test_silver_and_gold_join_by_the_names_analysts_use(sql_config, built, tmp_path):
    dsn, workdir = built
    joined = lakehouse(sql_config, "-q", "sql", "--format", "csv", ENTRIES_PER_USER.format(
        users="lakehouse_silver.users", entries="lakehouse_silver.time_entries"))
    query = tmp_path / "weeks.sql"
    query.write_text(WEEKS_WITH_NAMES + ";\n")
    weeks = lakehouse(sql_config, "-q", "sql", "--format", "json", "-f", str(query))

    with psycopg.connect(dsn) as conn:
        source = conn.execute(ENTRIES_PER_USER.format(users="users", entries="time_entries"))
        expected = io.StringIO()
        csv.writer(expected, lineterminator="\n").writerows(
            [["email", "entries"], *source.fetchall()])
        names = dict(conn.execute("SELECT id, full_name FROM users").fetchall())
    assert joined.stdout == expected.getvalue()
    gold = read_delta(Lake.of(str(workdir / "lake")).gold("hours_per_user_per_week"))
    assert gold.num_rows > 0
    assert json.loads(weeks.stdout, parse_float=Decimal) == sorted(
        ({"iso_year": r["iso_year"], "iso_week": r["iso_week"], "user_id": r["user_id"],
          "full_name": names[r["user_id"]], "hours": r["hours"]} for r in gold.to_pylist()),
        key=lambda r: (r["iso_year"], r["iso_week"], r["user_id"]))


@pytest.mark.spark
def test_a_bad_query_gets_the_engines_message_and_exit_2(sql_config):
    result = lakehouse(sql_config, "-q", "sql", check=False, timeout=300,
                       input="SELECT nope FROM lakehouse_silver.users\n")

    assert result.returncode == 2, result.stderr[-2000:]
    assert "lakehouse sql: error: the query failed:" in result.stderr
    assert "nope" in result.stderr
    assert "Traceback" not in result.stderr
    assert "QueryContextLogger" not in result.stderr  # PySpark's own record of the error
    assert result.stdout == ""


CLIENT = """
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
for table in sys.argv[2:]:
    print(spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0])
"""


@pytest.mark.spark
def test_serve_gives_spark_connect_clients_the_tables(sql_config, built, tmp_path):
    workdir = built[1]
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    server = start_lakehouse(sql_config, "-q", "sql", "--serve", "--port", str(port),
                             stdout=subprocess.PIPE, stderr=log, text=True)
    lines: list[str] = []  # read by a thread: a silent server must fail the test, not hang it
    threading.Thread(target=lambda: lines.extend(server.stdout), daemon=True).start()
    try:
        deadline = time.monotonic() + 300
        while not any(line.startswith("attach") for line in lines):
            assert time.monotonic() < deadline and server.poll() is None, \
                (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.2)
        url = lines[0].removeprefix("Spark Connect endpoint: ").strip()
        assert url.startswith(f"sc://127.0.0.1:{port}")
        assert "lakehouse_gold.hours_per_project_per_day" in lines[1]
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, url, "lakehouse_silver.users",
             "lakehouse_gold.hours_per_project_per_day"],
            capture_output=True, text=True, timeout=300)
        assert client.returncode == 0, client.stderr[-3000:]
        lake = Lake.of(str(workdir / "lake"))
        assert client.stdout.split() == [
            str(read_delta(lake.silver("public", "users")).num_rows),
            str(read_delta(lake.gold("hours_per_project_per_day")).num_rows)]
    finally:
        server.send_signal(2)  # Ctrl-C
        code = server.wait(120)
    assert code == 0


def test_a_reader_that_leaves_early_ends_the_command_quietly(tmp_path):
    config = tmp_path / "lakehouse.yml"
    config.write_text(yaml.safe_dump({"source": {"dsn": "host=127.0.0.1 port=1"},
                                      "lake": {"path": str(tmp_path / "lake")},
                                      "engine": "local"}))
    query = start_lakehouse(config, "sql", "--format", "csv", "SELECT id FROM range(1000000)",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert query.stdout.readline() == b"id\n"
    query.stdout.close()  # as `| head -1` does
    code = query.wait(120)

    stderr = query.stderr.read().decode()
    assert code == 141, stderr[-2000:]
    assert "lakehouse sql:" not in stderr  # no error of its own, no "lake storage error"
