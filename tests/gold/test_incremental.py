"""Incremental gold refresh (`incremental by`) against a full recompute, on Sail and on
classic Spark with delta-spark.

Silver is written here the way silver leaves it (live rows with their positions, a
tombstone per deleted key, nothing at all after a truncate), from a Python model of
random histories: inserts, updates that move an entry to another day, month, user or
project, deletes, re-inserts of deleted keys, truncates, and changes to a table the
reports join (projects). After every batch `run_gold` refreshes the demo's reports, and
each gold table must equal the report's query run over the whole of silver. Which way
a refresh goes, by groups or whole because that was faster, is tested from recorded
times seeded in `_state/gold_refreshes`, never from the seconds of this run.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, replace
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.catalog import TableNames
from pipelines.gold.build import build_report, report_columns
from pipelines.gold.conform import conform_to_schema
from pipelines.gold.definitions import load_reports
from pipelines.gold.io import TableGoldIO, register_inputs
from pipelines.gold.run import run_gold
from pipelines.gold.state import FULL, INCREMENTAL, read_refreshes, record_refresh
from pipelines.lake import Lake
from pipelines.spark_jobs import counted_jobs
from pipelines.status.report import LakeStatus, status_lines

from tests.support.gold_rows import META, SILVER_DDL, SILVER_ROWS, entry, silver_frame, ts

pytestmark = pytest.mark.spark

DAYS = ["2026-03-30", "2026-03-31", "2026-04-01", "2026-04-02", "2026-05-01"]
PROJECTS = [100, 101, 200, 300]
KEY = "id string"

op = st.one_of(
    *[st.tuples(st.just("update"), st.integers(0, 50), st.sampled_from(DAYS),
                st.integers(1, 2), st.sampled_from(PROJECTS), st.integers(-5, 90))] * 3,
    st.tuples(st.just("insert"), st.sampled_from(DAYS), st.integers(1, 2),
              st.sampled_from(PROJECTS), st.integers(-5, 90)),
    st.tuples(st.just("update"), st.integers(0, 50), st.sampled_from(DAYS),
              st.integers(1, 2), st.sampled_from(PROJECTS), st.integers(-5, 90)),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("reinsert"), st.integers(0, 50), st.sampled_from(DAYS)),
    st.tuples(st.just("truncate")),
    st.tuples(st.just("project"), st.sampled_from(PROJECTS)),
)
histories = st.lists(st.lists(op, min_size=1, max_size=8), min_size=2, max_size=4)
# the incremental reports, and one report that reads one of them (rebuilt whole)
REPORTS = ["finished_entries_per_day", "active_users_per_day",
           "billable_per_client_per_month", "hours_per_project_per_day"]


class SilverModel:
    """Silver's contents after each change: live rows and tombstones, with positions."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple] = {}  # id -> (entry row, position)
        self.tombstones: dict[str, int] = {}  # id -> position of the delete
        self.projects = {row[0]: row for row in SILVER_ROWS["projects"]}
        self.projects_lsn = 1
        self.lsn = 1000
        self.made = 0

    def apply(self, change: tuple) -> None:
        self.lsn += 1
        kind, *args = change
        live = sorted(self.rows)
        if kind == "insert":
            self.made += 1
            self._put(f"n{self.made:03d}", *args)
        elif kind == "update" and live:
            self._put(live[args[0] % len(live)], *args[1:])
        elif kind == "delete" and live:
            key = live[args[0] % len(live)]
            del self.rows[key]
            self.tombstones[key] = self.lsn
        elif kind == "reinsert" and self.tombstones:
            dead = sorted(self.tombstones)
            self._put(dead[args[0] % len(dead)], args[1], 1, 100, 30)
        elif kind == "truncate":
            self.rows.clear()
            self.tombstones.clear()  # silver drops the tombstones below the floor
        elif kind == "project":
            id_, client, name, billable, started = self.projects[args[0]]
            self.projects[args[0]] = (id_, client, name, not billable, started)
            self.projects_lsn = self.lsn

    def _put(self, key: str, day: str, user: int, project: int, minutes: int) -> None:
        start = ts(f"{day} 23:40:00")
        stop = start + dt.timedelta(minutes=minutes)
        row = entry(key, user, project, start.strftime("%Y-%m-%d %H:%M:%S"),
                    stop.strftime("%Y-%m-%d %H:%M:%S"), f"{minutes}.25")
        self.rows[key] = (row, self.lsn)
        self.tombstones.pop(key, None)

    def write(self, spark, lake: Lake) -> None:
        commit = ts("2027-02-01 00:00:00")
        entries = [row + (lsn, 0, commit) for row, lsn in self.rows.values()]
        tombstones = [(key, lsn, 0, commit) for key, lsn in self.tombstones.items()]
        projects = [row + (self.projects_lsn, 0, commit) for row in self.projects.values()]
        for where, rows, ddl in (
                (lake.silver("public", "time_entries"), entries, SILVER_DDL["time_entries"]),
                (lake.tombstones("public", "time_entries"), tombstones, KEY),
                (lake.silver("public", "projects"), projects, SILVER_DDL["projects"])):
            (spark.createDataFrame(rows, f"{ddl}, {META}").write.format("delta")
             .mode("overwrite").save(where.uri))


def write_static_silver(spark, lake: Lake) -> None:
    for table in ("users", "clients"):
        silver_frame(spark, table).write.format("delta").save(lake.silver("public", table).uri)


def whole(spark, io, report) -> list[tuple]:
    """The report's query over all of silver, as its gold table would hold it."""
    views, missing = register_inputs(spark, io, report)
    assert not missing
    df = build_report(spark, report, views)
    return sorted(conform_to_schema(df, report_columns(spark, report, df, io, False))
                  .collect(), key=repr)


def gold(spark, lake: Lake, report: str) -> list[tuple]:
    return sorted(spark.read.format("delta").load(lake.gold(report).uri).collect(), key=repr)


def test_incremental_refresh_equals_a_full_recompute_after_every_batch(
        spark, engine, demo_reports, tmp_path_factory):
    # classic Spark takes seconds a refresh where Sail takes a fraction: fewer histories
    @settings(max_examples=6 if engine == "sail" else 2, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(history=histories)
    def refreshed_equals_whole(history):
        lake = Lake.of(tmp_path_factory.mktemp("lake"))
        write_static_silver(spark, lake)
        io = TableGoldIO(spark, TableNames(lake))
        model = SilverModel()
        for _ in range(3):
            model.apply(("insert", "2026-03-31", 1, 100, 30))
        model.write(spark, lake)
        run_gold(spark, io, demo_reports, REPORTS)
        for batch in history:
            for change in batch:
                model.apply(change)
            model.write(spark, lake)
            result = run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports,
                              REPORTS)
            assert not result.failed and not result.skipped, result.runs
            refreshes = read_refreshes(lake)
            kinds.add(refreshes["finished_entries_per_day"].kind)
            for report in demo_reports.select(REPORTS):
                assert gold(spark, lake, report.name) == whole(spark, io, report), (
                    report.name, batch, refreshes[report.name])

    kinds: set[str] = set()
    refreshed_equals_whole()
    assert kinds == {FULL, INCREMENTAL}  # both ways were compared


def test_a_refresh_replaces_only_the_touched_groups(spark, demo_reports, tmp_path):
    lake = Lake.of(tmp_path / "lake")
    write_static_silver(spark, lake)
    io = TableGoldIO(spark, TableNames(lake))
    model = SilverModel()
    for day in DAYS:
        model.apply(("insert", day, 1, 100, 30))
    model.write(spark, lake)
    reports = ["finished_entries_per_day", "active_users_per_day"]
    first = run_gold(spark, io, demo_reports, reports)
    assert [r.groups for r in first.runs] == [None, None]  # the first build is whole
    assert {r.kind for r in read_refreshes(lake).values()} == {FULL}

    model.apply(("update", 0, DAYS[1], 2, 100, 45))  # n001 moves from DAYS[0] to DAYS[1]
    model.write(spark, lake)
    second = run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports, reports)
    assert {r.report: r.groups for r in second.runs} == {
        "finished_entries_per_day": 2, "active_users_per_day": 2}
    refresh = read_refreshes(lake)["finished_entries_per_day"]
    assert (refresh.kind, refresh.groups, refresh.table_rows) == (INCREMENTAL, 2, 5)
    assert refresh.summary() == "incremental, 2 group(s) replaced (2 rows)"
    shown = status_lines(None, None, "unreachable", LakeStatus(gold=read_refreshes(lake)), [])
    assert [line.split(" ago, ")[1] for line in shown if line.startswith("gold ")] == [
        "incremental, 2 group(s) replaced (1 rows)", "incremental, 2 group(s) replaced (2 rows)"]
    rows = sorted((r.day.isoformat(), r.user_id, r.entries) for r in
                  spark.read.format("delta").load(lake.gold(reports[0]).uri).collect())
    assert rows == [(DAYS[1], 1, 1), (DAYS[1], 2, 1), (DAYS[2], 1, 1), (DAYS[3], 1, 1),
                    (DAYS[4], 1, 1)]

    third = run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports, reports)
    assert [r.groups for r in third.runs] == [0, 0]  # nothing changed: nothing written
    assert [r.rows for r in third.runs] == [0, 0]

    forced = run_gold(spark, io, demo_reports, reports, full=True)
    assert [r.groups for r in forced.runs] == [None, None]
    assert read_refreshes(lake)["active_users_per_day"].reason == "--full"


def test_a_money_value_survives_the_merge(spark, demo_reports, tmp_path):
    """billable_per_client_per_month by month: decimals and a client join."""
    lake = Lake.of(tmp_path / "lake")
    write_static_silver(spark, lake)
    model = SilverModel()
    model.apply(("insert", "2026-03-31", 1, 100, 30))
    model.apply(("insert", "2026-04-01", 1, 100, 30))
    model.write(spark, lake)
    io = TableGoldIO(spark, TableNames(lake))
    run_gold(spark, io, demo_reports, ["billable_per_client_per_month"])
    model.apply(("update", 0, "2026-04-02", 1, 100, 61))
    model.write(spark, lake)
    run = run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports,
                   ["billable_per_client_per_month"]).runs[0]
    assert run.groups == 2  # March loses its entry, April gains it
    rows = {r.month.isoformat(): r.billable_amount for r in
            spark.read.format("delta").load(lake.gold("billable_per_client_per_month").uri)
            .collect()}
    assert rows == {"2026-04-01": Decimal("91.50")}


CHOSEN = "finished_entries_per_day"


def built_once(spark, demo_reports, lake: Lake) -> SilverModel:
    """Silver with an entry on each of DAYS, and CHOSEN built whole from it."""
    write_static_silver(spark, lake)
    model = SilverModel()
    for day in DAYS:
        model.apply(("insert", day, 1, 100, 30))
    model.write(spark, lake)
    run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports, [CHOSEN])
    return model


def refreshed(spark, demo_reports, lake: Lake, model: SilverModel, *changes: tuple):
    """CHOSEN refreshed after `changes`: its run, and its record."""
    for change in changes:
        model.apply(change)
    model.write(spark, lake)
    run = run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports, [CHOSEN])
    assert not run.failed, run.runs
    return run.runs[0], read_refreshes(lake)[CHOSEN]


def seed_times(lake: Lake, whole: float, groups: float) -> None:
    """Record these seconds as CHOSEN's last whole build and last refresh by groups."""
    record_refresh(lake, replace(read_refreshes(lake)[CHOSEN], whole_seconds=whole,
                                 groups_seconds=groups))


MOVE = ("update", 0, DAYS[1], 2, 100, 45)  # n001 moves from DAYS[0] to DAYS[1]


def test_a_slower_refresh_by_groups_makes_the_next_one_whole(spark, demo_reports, tmp_path):
    lake = Lake.of(tmp_path / "lake")
    model = built_once(spark, demo_reports, lake)
    seed_times(lake, whole=1.0, groups=2.5)

    run, refresh = refreshed(spark, demo_reports, lake, model, MOVE)
    faster = "a whole rebuild is faster here: 1.00 s against 2.50 s by groups"
    assert (run.groups, refresh.kind, refresh.reason) == (None, FULL, faster)
    assert refresh.groups_seconds == 2.5 and refresh.whole_seconds != 1.0  # timed anew
    report = demo_reports.get(CHOSEN)
    assert gold(spark, lake, CHOSEN) == whole(spark, TableGoldIO(spark, TableNames(lake)),
                                              report)
    status = LakeStatus(gold=read_refreshes(lake))
    shown = status_lines(None, None, "unreachable", status, [])
    assert [line.split(" ago, ")[1] for line in shown if line.startswith("gold ")] == [
        f"full, 5 rows ({faster})"]
    as_json = json.loads(json.dumps(asdict(status), default=str))  # as `status --json`
    assert as_json["gold"][CHOSEN]["reason"] == faster

    seed_times(lake, whole=1.0, groups=2.5)
    run, refresh = refreshed(spark, demo_reports, lake, model)
    assert (run.groups, refresh.kind) == (0, INCREMENTAL)  # nothing new: nothing to build

    seed_times(lake, whole=3.0, groups=2.5)  # the table grew: its whole build is slower
    run, refresh = refreshed(spark, demo_reports, lake, model, ("update", 1, DAYS[3], 1,
                                                                100, 50))
    assert (run.groups, refresh.kind, refresh.reason) == (2, INCREMENTAL, None)


def test_a_slower_whole_build_keeps_refreshing_by_groups(spark, demo_reports, tmp_path):
    lake = Lake.of(tmp_path / "lake")
    model = built_once(spark, demo_reports, lake)
    seed_times(lake, whole=2.5, groups=1.0)
    run, refresh = refreshed(spark, demo_reports, lake, model, MOVE)
    assert (run.groups, refresh.kind, refresh.reason) == (2, INCREMENTAL, None)

    seed_times(lake, whole=1.0, groups=1.0)  # as fast: by groups
    run, refresh = refreshed(spark, demo_reports, lake, model, ("update", 1, DAYS[3], 1,
                                                                100, 50))
    assert (run.groups, refresh.kind) == (2, INCREMENTAL)

    seed_times(lake, whole=1.0, groups=2.5)  # --full is whole, and says so
    forced = run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports, [CHOSEN],
                      full=True)
    assert forced.runs[0].groups is None
    assert read_refreshes(lake)[CHOSEN].reason == "--full"


def test_each_way_of_refreshing_records_its_time(spark, demo_reports, tmp_path):
    lake = Lake.of(tmp_path / "lake")
    model = built_once(spark, demo_reports, lake)
    first = read_refreshes(lake)[CHOSEN]
    assert first.whole_seconds > 0 and first.groups_seconds is None

    _, by_groups = refreshed(spark, demo_reports, lake, model, MOVE)
    assert by_groups.kind == INCREMENTAL  # no refresh by groups timed yet: it is tried
    assert by_groups.groups_seconds > 0 and by_groups.whole_seconds == first.whole_seconds

    _, idle = refreshed(spark, demo_reports, lake, model)  # no groups: nothing to time
    assert (idle.groups, idle.whole_seconds, idle.groups_seconds) == (
        0, first.whole_seconds, by_groups.groups_seconds)

    run_gold(spark, TableGoldIO(spark, TableNames(lake)), demo_reports, [CHOSEN], full=True)
    forced = read_refreshes(lake)[CHOSEN]
    assert forced.whole_seconds != first.whole_seconds
    assert forced.groups_seconds == by_groups.groups_seconds


PER_USER = """-- columns: user_id bigint, entries bigint
-- incremental by: user_id
SELECT user_id, COUNT(*) AS entries FROM lakehouse_silver.time_entries
GROUP BY {grouping}
"""
# A ROLLUP adds a row of every group together, with NULL for the group: not a row of any
# one group, which a refresh by groups cannot replace.
ROLLUP = "ROLLUP(user_id)"


def per_user(spark, tmp_path, users: tuple, grouping: str = "user_id"):
    """Silver with an entry of each of `users` on DAYS[0], and the report of entries per
    user (grouped by `grouping`) built whole from it: the model, the lake and the report."""
    lake = Lake.of(tmp_path / "lake")
    write_static_silver(spark, lake)
    model = SilverModel()
    for user in users:
        model.apply(("insert", DAYS[0], user, 100, 30))
    model.write(spark, lake)
    directory = tmp_path / "reports"
    directory.mkdir()
    (directory / "entries_per_user.sql").write_text(PER_USER.format(grouping=grouping))
    reports = load_reports(directory, "lakehouse_silver", "lakehouse_gold")
    first = run_gold(spark, TableGoldIO(spark, TableNames(lake)), reports).runs[0]
    return model, lake, reports, first


def test_a_null_group_the_refresh_did_not_touch_keeps_its_row(spark, tmp_path):
    model, lake, reports, first = per_user(spark, tmp_path, (1, 2, None))
    assert first.error is None
    model.apply(MOVE)  # n001 moves from user 1 to user 2
    model.write(spark, lake)
    run = run_gold(spark, TableGoldIO(spark, TableNames(lake)), reports).runs[0]
    assert (run.error, run.groups) == (None, 2)
    assert gold(spark, lake, "entries_per_user") == sorted([(2, 2), (None, 1)], key=repr)

    model.apply(("update", 2, DAYS[1], 1, 100, 30))  # the NULL user's entry goes to user 1
    model.write(spark, lake)
    record_refresh(lake, replace(read_refreshes(lake)["entries_per_user"], whole_seconds=2.0,
                                 groups_seconds=1.0))  # by groups, whatever this run timed
    run = run_gold(spark, TableGoldIO(spark, TableNames(lake)), reports).runs[0]
    assert (run.error, run.groups) == (None, 2)
    assert gold(spark, lake, "entries_per_user") == [(1, 1), (2, 2)]


def test_a_group_no_silver_row_gives_fails_the_first_build_by_name(spark, tmp_path):
    _, lake, reports, first = per_user(spark, tmp_path, (1, 2), ROLLUP)
    assert first.error == (
        f"gold report {reports.get('entries_per_user').path}: incremental by user_id: the "
        "report has group None, which no row of silver time_entries gives as `user_id`; "
        "the report was written whole, but cannot be refreshed by groups: remove the "
        "header line or group by a column computed from each row")
    assert gold(spark, lake, "entries_per_user") == sorted([(1, 1), (2, 1), (None, 2)],
                                                           key=repr)


def test_a_refresh_that_gives_a_row_of_another_group_writes_nothing(spark, tmp_path):
    """With a NULL user_id in silver the whole build passes its check (the ROLLUP's total
    has a group a row gives); a refresh of users 1 and 2 then gives the total of those
    two, in group NULL, which it did not touch."""
    model, lake, reports, first = per_user(spark, tmp_path, (1, 2, None), ROLLUP)
    assert first.error is None and first.groups is None
    built = gold(spark, lake, "entries_per_user")
    assert built == sorted([(1, 1), (2, 1), (None, 1), (None, 3)], key=repr)

    model.apply(MOVE)
    model.write(spark, lake)
    run = run_gold(spark, TableGoldIO(spark, TableNames(lake)), reports).runs[0]
    assert run.error == (
        f"gold report {reports.get('entries_per_user').path}: incremental by user_id: the "
        "query gave a row of group None from rows of other groups; each group's rows must "
        "come from the silver rows of that group (remove the header line, or group by a "
        "column computed from each row)")
    assert gold(spark, lake, "entries_per_user") == built  # nothing written


REFRESH_JOBS = 26  # classic Spark, the suite's settings: one report's refresh of two groups


def test_a_refresh_by_groups_checks_its_rows_in_one_action(engine, spark, tmp_path):
    """The values' check and the check that every row is of a touched group are one
    aggregate over the report's rows, before the write. Classic Spark's jobs are a fixed
    toll per query, so they are pinned (a count is exact)."""
    if engine != "spark":
        pytest.skip("Spark Connect (Sail) has no job tracker; the Spark pass runs this")
    model, lake, reports, _ = per_user(spark, tmp_path, (1, 2))
    model.apply(MOVE)
    model.write(spark, lake)
    with counted_jobs(spark) as refresh:
        run = run_gold(spark, TableGoldIO(spark, TableNames(lake)), reports).runs[0]
    assert (run.error, run.groups, run.rows) == (None, 2, 1)
    assert refresh.jobs == REFRESH_JOBS
