"""A user's own report directory, built by `lakehouse gold` on the engine under test over a
lake the verbs built from real Postgres, and compared with the same queries on Postgres."""

from __future__ import annotations

import shutil
from decimal import Decimal

import psycopg
import pytest
import yaml

from pipelines.lake import Lake, read_delta
from tests.support.cli import lakehouse
from tests.support.demo import demo_lake
from tests.support.engines import CLASSIC_TEST_CONF
from tests.support.postgres import fresh_database

# one worker builds the module's lake for both tests
pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.xdist_group("user_reports")]

# Three reports, one reading another; each query's Postgres twin is the same text with
# the silver schema as `public` (and the report it reads inlined).
REPORTS = {
    "projects_per_client.sql": """\
-- description: projects and billable projects per client
-- columns: client_id int, client_name string, projects bigint, billable bigint

SELECT c.id AS client_id, c.name AS client_name, count(p.id) AS projects,
       count(CASE WHEN p.billable THEN 1 END) AS billable
FROM lakehouse_silver.clients c
LEFT JOIN lakehouse_silver.projects p ON p.client_id = c.id
GROUP BY c.id, c.name
""",
    "entries_per_project.sql": """\
SELECT project_id, count(*) AS entries, sum(billable) AS billable_amount
FROM lakehouse_silver.time_entries
GROUP BY project_id;
""",
    "client_entries.sql": """\
-- description: a report over a report and silver
SELECT ppc.client_id, ppc.client_name, ppc.projects, sum(e.entries) AS entries
FROM lakehouse_gold.projects_per_client ppc
JOIN lakehouse_silver.projects p ON p.client_id = ppc.client_id
JOIN lakehouse_gold.entries_per_project e ON e.project_id = p.id
GROUP BY ppc.client_id, ppc.client_name, ppc.projects
""",
}
POSTGRES = {
    "projects_per_client": REPORTS["projects_per_client.sql"].split("\n\n", 1)[1]
    .replace("lakehouse_silver.", "public."),
    "entries_per_project": REPORTS["entries_per_project.sql"].replace("lakehouse_silver.", "public.")
    .rstrip().rstrip(";"),
}
POSTGRES["client_entries"] = (
    f"WITH ppc AS ({POSTGRES['projects_per_client']}), e AS ({POSTGRES['entries_per_project']}) "
    "SELECT ppc.client_id, ppc.client_name, ppc.projects, sum(e.entries) AS entries FROM ppc "
    "JOIN public.projects p ON p.client_id = ppc.client_id JOIN e ON e.project_id = p.id "
    "GROUP BY ppc.client_id, ppc.client_name, ppc.projects")


@pytest.fixture(scope="module")
def built(pg_server, tmp_path_factory):
    """Silver of the demo's tables, built on Sail from a seeded database, and that database."""
    workdir = tmp_path_factory.mktemp("user_reports")
    with fresh_database(pg_server) as dsn:
        demo_lake(dsn, workdir)
        yield dsn, workdir


def engine_config(built, config_engine, tmp_path, reports) -> tuple:
    dsn, workdir = built
    lake = tmp_path / "lake"
    shutil.copytree(workdir / "lake" / "silver", lake / "silver")  # gold of its own per test
    directory = tmp_path / "gold"
    directory.mkdir()
    for name, text in reports.items():
        (directory / name).write_text(text)
    settings = {"source": {"dsn": dsn}, "lake": {"path": str(lake)}, "engine": config_engine,
                "gold": {"reports": "gold"}}  # relative to the config file
    if config_engine == "spark":
        settings["spark"] = {"conf": CLASSIC_TEST_CONF}
    config = tmp_path / "lakehouse.yml"
    config.write_text(yaml.safe_dump(settings))
    return config, Lake.of(str(lake))


def postgres_rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return sorted(tuple(row) for row in conn.execute(query).fetchall())


def test_user_reports_equal_the_same_queries_on_postgres(built, config_engine, tmp_path):
    config, lake = engine_config(built, config_engine, tmp_path, REPORTS)

    result = lakehouse(config, "gold")

    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [
        "entries_per_project", "projects_per_client", "client_entries"]
    for report, query in POSTGRES.items():
        gold = read_delta(lake.gold(report))
        rows = sorted(tuple(r.values()) for r in gold.to_pylist())
        expected = postgres_rows(built[0], query)
        assert rows == [tuple(int(v) if isinstance(v, int) else v for v in r) for r in expected]
        assert rows, report
    # declared types hold; undeclared ones are the query's (sum of decimal(10,2): (20,2))
    schema = read_delta(lake.gold("projects_per_client")).schema
    assert [str(f.type) for f in schema] == ["int32", "string", "int64", "int64"]
    amount = read_delta(lake.gold("entries_per_project")).schema.field("billable_amount")
    assert str(amount.type) == "decimal128(20, 2)"
    assert isinstance(read_delta(lake.gold("entries_per_project")).to_pylist()[0][
        "billable_amount"], Decimal)

    # `--report` runs one; the report it reads is used as it is
    one = lakehouse(config, "gold", "--report", "client_entries")
    assert one.stdout.startswith("client_entries: ") and len(one.stdout.splitlines()) == 1


def test_bad_reports_fail_with_the_file_named_and_nothing_half_written(built, config_engine,
                                                                       tmp_path):
    good = {"a_first.sql": "SELECT id, name FROM lakehouse_silver.clients"}
    config, lake = engine_config(built, config_engine, tmp_path, good)
    directory = tmp_path / "gold"

    (directory / "b_typo.sql").write_text("SELECT id, nme FROM lakehouse_silver.clients")
    rejected = lakehouse(config, "gold", check=False)
    assert rejected.returncode == 2
    assert f"gold report {directory / 'b_typo.sql'}: the engine rejects the query" \
        in rejected.stderr
    assert "Traceback" not in rejected.stderr
    assert not lake.gold("b_typo").exists()
    assert lake.gold("a_first").exists()  # the reports that do not read it are built

    (directory / "b_typo.sql").write_text(
        "-- columns: id tinyint, name string\n"
        "SELECT id * 1000 AS id, name FROM lakehouse_silver.clients")
    misfit = lakehouse(config, "gold", check=False)
    assert misfit.returncode == 4
    assert "values do not fit the declared schema (id -> tinyint: 3 value(s))" in misfit.stderr
    assert str(directory / "b_typo.sql") in misfit.stderr
    assert not lake.gold("b_typo").exists()
    (directory / "b_typo.sql").unlink()

    # columns inferred at the first build are kept: a changed query is refused until --full
    built_rows = read_delta(lake.gold("a_first")).num_rows
    (directory / "a_first.sql").write_text("SELECT id AS client_id FROM lakehouse_silver.clients")
    changed = lakehouse(config, "gold", check=False)
    assert changed.returncode == 2
    assert "its columns changed from id, name to client_id" in changed.stderr
    assert read_delta(lake.gold("a_first")).column_names == ["id", "name"]
    assert read_delta(lake.gold("a_first")).num_rows == built_rows
    lakehouse(config, "gold", "--full")
    assert read_delta(lake.gold("a_first")).column_names == ["client_id"]

    (directory / "c_cycle.sql").write_text("SELECT * FROM lakehouse_gold.d_cycle")
    (directory / "d_cycle.sql").write_text("SELECT * FROM lakehouse_gold.c_cycle")
    cycle = lakehouse(config, "gold", check=False)
    assert cycle.returncode == 2 and "c_cycle.sql -> d_cycle.sql -> c_cycle.sql" in cycle.stderr
