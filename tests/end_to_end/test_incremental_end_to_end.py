"""Incremental gold refresh over a lake the verbs built from real Postgres: after changes
that move entries between days, delete and insert some, `ingest`, `silver` and `gold`
refresh the demo's daily reports by the touched days only, and they equal the same
queries on the source."""

from __future__ import annotations

import psycopg
import pytest

from pipelines.gold.state import INCREMENTAL, read_refreshes
from pipelines.lake import Lake, read_delta
from tests.support.cli import lakehouse
from tests.support.demo import demo_lake
from tests.support.postgres import fresh_database

pytestmark = pytest.mark.postgres

# The demo's day rules on Postgres: the UTC day of started_at, finished entries only,
# exact microseconds.
FINISHED_PER_DAY = """
SELECT (started_at AT TIME ZONE 'UTC')::date AS day, user_id, project_id, count(*),
       sum(extract(epoch FROM stopped_at - started_at) * 1000000)::numeric(38,0)
FROM time_entries WHERE stopped_at IS NOT NULL AND stopped_at >= started_at
GROUP BY 1, 2, 3"""
ACTIVE_PER_DAY = """
SELECT (started_at AT TIME ZONE 'UTC')::date AS day, count(DISTINCT user_id)
FROM time_entries GROUP BY 1"""


def test_daily_reports_refresh_by_the_days_that_changed(pg_server, tmp_path):
    with fresh_database(pg_server) as dsn:
        config = demo_lake(dsn, tmp_path, gold=True)
        lake = Lake.of(str(tmp_path / "lake"))
        assert read_refreshes(lake)["finished_entries_per_day"].kind == "full"
        with psycopg.connect(dsn) as conn:
            # two entries move a week on (their old and new days change), one is deleted,
            # one new entry lands on a new day
            conn.execute("UPDATE time_entries SET started_at = started_at + interval '7 days', "
                         "stopped_at = stopped_at + interval '7 days' WHERE id IN "
                         "(SELECT id FROM time_entries WHERE stopped_at IS NOT NULL "
                         "ORDER BY id LIMIT 2)")
            conn.execute("DELETE FROM time_entries WHERE id = "
                         "(SELECT id FROM time_entries ORDER BY id DESC LIMIT 1)")
            conn.execute("INSERT INTO time_entries (id, user_id, project_id, started_at, "
                         "stopped_at) SELECT gen_random_uuid(), user_id, project_id, "
                         "'2031-01-01 10:00Z', '2031-01-01 11:00Z' FROM time_entries LIMIT 1")
        for verb in (["ingest", "--until-idle", "2"], ["silver"]):
            lakehouse(config, *verb)
        out = lakehouse(config, "gold").stdout

        refreshes = read_refreshes(lake)
        for report in ("finished_entries_per_day", "active_users_per_day"):
            refresh = refreshes[report]
            assert refresh.kind == INCREMENTAL, (report, refresh)
            assert 2 <= refresh.groups <= 6, (report, refresh)  # of dozens of days
            assert f"{report}: {refresh.rows} rows in {refresh.groups} group(s)" in out
        with psycopg.connect(dsn) as conn:
            for report, query in (("finished_entries_per_day", FINISHED_PER_DAY),
                                  ("active_users_per_day", ACTIVE_PER_DAY)):
                expected = sorted(tuple(row) for row in conn.execute(query).fetchall())
                gold = sorted(tuple(row.values())
                              for row in read_delta(lake.gold(report)).to_pylist())
                assert gold == expected, report
