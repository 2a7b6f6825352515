"""`lakehouse backfill` and `lakehouse status` as users run them: exit codes, reruns, output."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.support.backfill import setup_source, snapshot_rows, states
from tests.support.cli import lakehouse
from tests.support.config import make_config, write_config

pytestmark = pytest.mark.pg_versions

DDL = """
CREATE TABLE users (id bigint PRIMARY KEY, name text);
CREATE TABLE notes (id int PRIMARY KEY, body text);
CREATE TABLE nothing (id int PRIMARY KEY);
INSERT INTO users SELECT i, 'user ' || i FROM generate_series(1, 120) i;
INSERT INTO notes SELECT i, 'note ' || i FROM generate_series(1, 30) i;
ANALYZE users;
"""
TABLES = ["public.users", "public.notes", "public.nothing"]


def summary(stdout: str) -> dict[str, str]:
    """table -> status from the summary table printed at the end."""
    return {cells[0]: cells[1] for cells in
            ([c.strip() for c in line.split("|")] for line in stdout.splitlines()[2:])}


@pytest.fixture
def config_file(source_dsn, lake, tmp_path):
    setup_source(source_dsn, DDL, TABLES)
    return write_config(tmp_path / "lakehouse.yml", source_dsn, lake, TABLES)


def test_backfill_then_rerun_skips_and_restart_starts_a_new_backfill(config_file, source_dsn, lake):
    config = make_config(source_dsn, lake, TABLES)
    first = lakehouse(config_file, "backfill", "--chunk-size", "50", "--parallel", "2",
                      check=False)
    assert first.returncode == 0, first.stderr
    assert [c.strip() for c in first.stdout.splitlines()[0].split("|")] == [
        "table", "status", "rows", "chunks", "time", "rows/s", "total rows", "backfill id"]
    assert summary(first.stdout) == dict.fromkeys(TABLES, "done")
    ids = {s.table_name: s.backfill_id for s in states(config)}
    nothing = next(s for s in states(config) if s.table_name == "public.nothing")
    assert nothing.status == "done" and nothing.rows_done == 0 and nothing.chunks_done == 1

    again = lakehouse(config_file, "backfill", "public.users", "notes", check=False)
    assert again.returncode == 0, again.stderr
    assert summary(again.stdout) == {"public.users": "skipped", "public.notes": "skipped"}
    assert "already backfilled" in again.stderr
    assert len(snapshot_rows(config)) == 150

    restarted = lakehouse(config_file, "backfill", "--restart", "public.users", "--chunk-size",
                          "500", check=False)
    assert restarted.returncode == 0, restarted.stderr
    users = [s for s in states(config) if s.table_name == "public.users"]
    assert len(users) == 2 and users[1].backfill_id != ids["public.users"]
    assert users[1].rows_done == 120 and users[1].rows_estimate == 120
    assert len(snapshot_rows(config, "public.users")) == 240

    status = lakehouse(config_file, "status", "--json", check=False)
    assert status.returncode == 0, status.stderr
    backfills = {b["table_name"]: b for b in json.loads(status.stdout)["backfills"]}
    assert backfills["public.users"]["backfill_id"] == users[1].backfill_id
    assert backfills["public.users"]["status"] == "done"
    assert backfills["public.users"]["rows_done"] == 120
    text = lakehouse(config_file, "status", check=False)
    assert "backfill public.users: done, 120 / ~120 rows (100%)" in text.stdout


def test_table_outside_the_config_and_bad_flags_exit_2(config_file):
    result = lakehouse(config_file, "backfill", "public.elsewhere", check=False)
    assert result.returncode == 2
    assert "not a configured table: public.elsewhere" in result.stderr
    assert "Traceback" not in result.stderr
    zero = lakehouse(config_file, "backfill", "--chunk-size", "0", check=False)
    assert zero.returncode == 2 and "--chunk-size: got 0" in zero.stderr


def test_configured_table_missing_from_the_publication_exits_2(config_file, source_dsn, lake, tmp_path):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE later (id int PRIMARY KEY)")
    wider = write_config(tmp_path / "wider.yml", source_dsn, lake, TABLES + ["public.later"])
    result = lakehouse(wider, "backfill", "public.later", check=False)
    assert result.returncode == 2
    assert "not in publication 'lakehouse': public.later" in result.stderr
    assert "lakehouse setup" in result.stderr


def test_table_without_key_is_refused_with_the_fix_exit_3(config_file, source_dsn):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE notes DROP CONSTRAINT notes_pkey")
    result = lakehouse(config_file, "backfill", "public.notes", check=False)
    assert result.returncode == 3
    assert "without a primary key or replica identity index: public.notes" in result.stderr
    assert "ADD PRIMARY KEY" in result.stderr and "Traceback" not in result.stderr


def test_backfill_before_setup_exits_3(source_dsn, lake, tmp_path):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute(DDL)
    config_file = write_config(tmp_path / "c.yml", source_dsn, lake, TABLES)
    result = lakehouse(config_file, "backfill", check=False)
    assert result.returncode == 3
    assert "run lakehouse setup" in result.stderr
