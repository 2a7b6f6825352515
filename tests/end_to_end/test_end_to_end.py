"""The whole pipeline as users run it: `lakehouse demo`, `lakehouse run` and `status`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import psycopg
import pytest
import yaml
from deltalake import DeltaTable

from pipelines.embedded_pg import free_port
from pipelines.lake import read_delta
from pipelines.source.setup import run_setup
from pipelines.config import SourceConfig
from tests.support.cli import lakehouse, start_lakehouse
from tests.support.config import write_config
from tests.support.engines import CLASSIC_TEST_CONF

pytestmark = [pytest.mark.postgres, pytest.mark.spark]  # on Sail and on classic Spark


@pytest.mark.long
def test_short_demo_run_verifies_and_prints_reports(tmp_path, config_engine):
    workdir = tmp_path / "demo"
    workdir.parent.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}  # the CLI's default
    result = lakehouse(None, "demo", "--workdir", str(workdir), "--rows", "1500", "--seconds",
                       "3", "--port", str(free_port()), "--engine", config_engine, env=env,
                       check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for table in ("users", "clients", "projects", "project_members", "time_entries"):
        assert f"public.{table}: equal" in out
    assert "DIFFERENT" not in out
    assert "== hours_per_project_per_day" in out and "== active_users_per_day" in out
    assert "summary:" in out and "freshness" in out
    assert yaml.safe_load((workdir / "lakehouse.yml").read_text())["engine"] == config_engine
    engine_log = re.compile(r"^\[\S+ +(INFO|WARN) +sail"  # Sail's
                            r"|^\S+ \S+ (INFO|WARN) \w+: "  # Spark's default log4j profile
                            r"|^\S+ +(INFO|WARN) +org\.apache\."  # the CLI's log4j lines
                            r"|Setting default log level", re.MULTILINE)
    assert not engine_log.findall(out + result.stderr)  # the engine's own log: only with -v


@pytest.mark.pg_versions
def test_run_applies_changes_continuously_and_status_reports_them(source_dsn, tmp_path,
                                                                  config_engine):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
    reports = tmp_path / "gold"
    reports.mkdir()
    (reports / "note_count.sql").write_text("SELECT count(*) AS notes FROM lakehouse_silver.notes")
    (reports / "broken.sql").write_text("SELECT nope FROM lakehouse_silver.notes")
    (reports / "constant.sql").write_text("SELECT 1 AS one")  # reads nothing silver changes
    config_path = write_config(
        tmp_path / "lakehouse.yml", source_dsn, tmp_path / "lake", ["public.notes"],
        engine=config_engine, gold={"reports": str(reports)},
        spark={"master": "local[2]", "conf": CLASSIC_TEST_CONF},
        ingest={"batch_seconds": 0.2}, silver={"interval_seconds": 1})
    run_setup(SourceConfig(source_dsn, tables=("public.notes",)))
    log = (tmp_path / "run.log").open("w")  # not a pipe: nobody reads it while it runs
    proc = start_lakehouse(config_path, "run", stdout=log, stderr=subprocess.STDOUT)
    try:
        with psycopg.connect(source_dsn) as conn:
            conn.execute("INSERT INTO notes SELECT g, 'n' || g FROM generate_series(1, 20) g")
        silver = tmp_path / "lake" / "silver" / "public" / "notes"
        _wait(lambda: DeltaTable.is_deltatable(str(silver))
              and read_delta(silver, ["id"]).num_rows == 20)

        def status() -> dict:
            done = lakehouse(config_path, "status", "--json", check=False)
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)
        # silver records its progress after its MERGE statements: wait for that too
        _wait(lambda: "public.notes" in status()["lake"]["silver"])
        report = status()
        assert report["slot"]["active"] is True and report["slot"]["exists"] is True
        assert report["lake"]["bronze_confirmable_lsn"] != "0/0"
        assert report["lake"]["silver"]["public.notes"]["error"] is None

        with psycopg.connect(source_dsn) as conn:
            conn.execute("DELETE FROM notes WHERE id <= 5")
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    logged = (tmp_path / "run.log").read_text()
    assert proc.returncode == 0, logged[-3000:]
    assert sorted(read_delta(silver, ["id"]).column("id").to_pylist()) == list(range(6, 21))
    # a report with a mistake is logged (once) and the others are built all the same
    assert logged.count(f"gold broken failed: gold report {reports / 'broken.sql'}") == 1
    assert read_delta(tmp_path / "lake" / "gold" / "note_count").to_pylist() == [{"notes": 15}]
    # each pass refreshes the reports of what it changed: the insert's and the delete's
    # passes rebuilt note_count, the first alone the report that reads no table
    assert DeltaTable(str(tmp_path / "lake" / "gold" / "note_count")).version() >= 1
    assert DeltaTable(str(tmp_path / "lake" / "gold" / "constant")).version() == 0
    assert "; gold 1 report(s) in" in logged and ", 1 with nothing new" in logged
    with psycopg.connect(source_dsn) as conn:
        active = conn.execute("SELECT active FROM pg_replication_slots "
                              "WHERE slot_name = 'lakehouse'").fetchone()[0]
    assert active is False  # the ingest let go of the slot


def _wait(condition, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError("condition not met in time")
