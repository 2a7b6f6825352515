"""Silver-typed demo rows with the edge cases of the gold reports, and what the reports say.

Entries (UTC), by id:
  e01 Ana Website 2026-03-02 09:00-10:30            1.5 h
  e02 Ana Website 2026-03-02 23:30-03-03 01:00      1.5 h, spans midnight: counts on 03-02
  e03 Bo  Website 2026-03-02 12:00-(open)           no hours; active on 03-02
  e04 Bo  Internal 2026-03-03 08:00-08:20           0.3333 h, project not billable
  e05 Ana Website 2026-03-05 10:00:00-10:00:01      1 s = 0.0003 h (0.000277.. half up)
  e06 Bo  Website 2026-03-06 10:00-09:00            stops before it starts: no hours
  e07 Ana Website 2026-12-31 (Thu) 10:00-11:00      ISO 2026-W53
  e08 Ana Audit   2027-01-01 (Fri) 10:00-10:03      ISO 2026-W53; 0.05 h x 0.10 = 0.005 -> 0.01
  e09 Ana Website 2027-01-03 (Sun) 22:00-01-04 00:30 ISO 2026-W53 (not 2027-W01)
  e10 Ana Website 2027-01-04 (Mon) 09:00-10:00      ISO 2027-W01
  e11 Bo  Internal 2021-01-03 (Sun) 09:00-10:00     ISO 2020-W53
  e12 Bo  Internal 2024-12-30 (Mon) 09:00-10:00     ISO 2025-W01
  h01..h20 Bo Huge 2026-05-15 12:00:xx, 1 s each, billable 99999999.99 each: the sum
      overflows decimal(10,2) and must stay exact.
Cy (user 3) has no entries.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal as D
from pathlib import Path
from typing import Any, Callable, Iterable

from pipelines.catalog import TableNames, ensure_schema, save_table
from pipelines.demo.run import DEMO_REPORTS
from pipelines.gold.io import view_name
from tests.support.config import write_config

UTC = dt.timezone.utc
META = "_lsn bigint, _change_index bigint, _commit_ts timestamp"
SILVER_DDL = {
    "users": "id bigint, email string, full_name string, active boolean, "
             "created_at timestamp",
    "clients": "id int, name string, hourly_rate decimal(10,2), country string",
    "projects": "id int, client_id int, name string, billable boolean, started_on date",
    "project_members": "project_id int, user_id bigint, role string, joined_at timestamp",
    "time_entries": "id string, user_id bigint, project_id int, started_at timestamp, "
                    "stopped_at timestamp, duration string, description string, "
                    "tags array<string>, billable decimal(10,2), source string, "
                    "metadata string",
}


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def day(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


def entry(id_, user, project, started, stopped, billable="0.00"):
    start = ts(started)
    stop = ts(stopped) if stopped else None
    duration = f"PT{int((stop - start).total_seconds())}S" if stop else None
    return (id_, user, project, start, stop, duration, None, ["demo"], D(billable), "timer",
            None)


SILVER_ROWS = {
    "users": [
        (1, "ana@example.com", "Ana", True, ts("2025-01-01 00:00:00")),
        (2, "bo@example.com", "Bo", True, ts("2025-01-01 00:00:00")),
        (3, "cy@example.com", "Cy", False, ts("2025-01-01 00:00:00")),
    ],
    "clients": [
        (10, "Acme", D("120.00"), "DE"),
        (20, "Globex", D("0.10"), "US"),
        (30, "Mega", D("99999999.99"), None),
    ],
    "projects": [
        (100, 10, "Website", True, day("2020-01-01")),
        (101, 10, "Internal", False, day("2020-01-01")),
        (200, 20, "Audit", True, day("2020-01-01")),
        (300, 30, "Huge", True, day("2020-01-01")),
    ],
    "project_members": [(100, 1, "owner", ts("2025-01-01 00:00:00"))],
    "time_entries": [
        entry("e01", 1, 100, "2026-03-02 09:00:00", "2026-03-02 10:30:00", "180.00"),
        entry("e02", 1, 100, "2026-03-02 23:30:00", "2026-03-03 01:00:00", "180.00"),
        entry("e03", 2, 100, "2026-03-02 12:00:00", None),
        entry("e04", 2, 101, "2026-03-03 08:00:00", "2026-03-03 08:20:00"),
        entry("e05", 1, 100, "2026-03-05 10:00:00", "2026-03-05 10:00:01", "0.01"),
        entry("e06", 2, 100, "2026-03-06 10:00:00", "2026-03-06 09:00:00"),
        entry("e07", 1, 100, "2026-12-31 10:00:00", "2026-12-31 11:00:00", "120.00"),
        entry("e08", 1, 200, "2027-01-01 10:00:00", "2027-01-01 10:03:00", "0.01"),
        entry("e09", 1, 100, "2027-01-03 22:00:00", "2027-01-04 00:30:00", "300.00"),
        entry("e10", 1, 100, "2027-01-04 09:00:00", "2027-01-04 10:00:00", "120.00"),
        entry("e11", 2, 101, "2021-01-03 09:00:00", "2021-01-03 10:00:00"),
        entry("e12", 2, 101, "2024-12-30 09:00:00", "2024-12-30 10:00:00"),
    ] + [entry(f"h{i:02d}", 2, 300, f"2026-05-15 12:00:{i:02d}", f"2026-05-15 12:00:{i + 1:02d}",
               "99999999.99") for i in range(20)],
}

EXPECTED = {
    "hours_per_project_per_day": [
        (day("2026-03-02"), 100, "Website", 10, "Acme", 2, D("3.0000")),
        (day("2026-03-03"), 101, "Internal", 10, "Acme", 1, D("0.3333")),
        (day("2026-03-05"), 100, "Website", 10, "Acme", 1, D("0.0003")),
        (day("2026-12-31"), 100, "Website", 10, "Acme", 1, D("1.0000")),
        (day("2027-01-01"), 200, "Audit", 20, "Globex", 1, D("0.0500")),
        (day("2027-01-03"), 100, "Website", 10, "Acme", 1, D("2.5000")),
        (day("2027-01-04"), 100, "Website", 10, "Acme", 1, D("1.0000")),
        (day("2021-01-03"), 101, "Internal", 10, "Acme", 1, D("1.0000")),
        (day("2024-12-30"), 101, "Internal", 10, "Acme", 1, D("1.0000")),
        (day("2026-05-15"), 300, "Huge", 30, "Mega", 20, D("0.0056")),
    ],
    "hours_per_user_per_week": [
        (2026, 10, day("2026-03-02"), 1, "ana@example.com", "Ana", 3, D("3.0003")),
        (2026, 53, day("2026-12-28"), 1, "ana@example.com", "Ana", 3, D("3.5500")),
        (2027, 1, day("2027-01-04"), 1, "ana@example.com", "Ana", 1, D("1.0000")),
        (2026, 10, day("2026-03-02"), 2, "bo@example.com", "Bo", 1, D("0.3333")),
        (2020, 53, day("2020-12-28"), 2, "bo@example.com", "Bo", 1, D("1.0000")),
        (2025, 1, day("2024-12-30"), 2, "bo@example.com", "Bo", 1, D("1.0000")),
        (2026, 20, day("2026-05-11"), 2, "bo@example.com", "Bo", 20, D("0.0056")),
    ],
    "billable_per_client_per_month": [
        # 3 h + 1 s = 3.0003 h (half up); x 120.00 = 360.036 -> 360.04
        (day("2026-03-01"), 10, "Acme", 6, D("360.01"), D("3.0003"), D("120.00"), D("360.04")),
        (day("2026-12-01"), 10, "Acme", 1, D("120.00"), D("1.0000"), D("120.00"), D("120.00")),
        (day("2027-01-01"), 10, "Acme", 2, D("420.00"), D("3.5000"), D("120.00"), D("420.00")),
        # 0.05 h x 0.10 = 0.005: half up gives 0.01 (half even would give 0.00)
        (day("2027-01-01"), 20, "Globex", 1, D("0.01"), D("0.0500"), D("0.10"), D("0.01")),
        (day("2021-01-01"), 10, "Acme", 1, D("0.00"), D("0.0000"), D("120.00"), D("0.00")),
        (day("2024-12-01"), 10, "Acme", 1, D("0.00"), D("0.0000"), D("120.00"), D("0.00")),
        # 20 x 99999999.99 overflows decimal(10,2); 0.0056 h x 99999999.99 = 559999.99994...
        (day("2026-05-01"), 30, "Mega", 20, D("1999999999.80"), D("0.0056"),
         D("99999999.99"), D("560000.00")),
    ],
    "active_users_per_day": [
        (day("2026-03-02"), 2),  # Ana, and Bo's open entry
        (day("2026-03-03"), 1),  # Bo only: Ana's e02 ends here but started the day before
        (day("2026-03-05"), 1),
        (day("2026-03-06"), 1),  # Bo's entry that stops before it starts still shows activity
        (day("2026-12-31"), 1),
        (day("2027-01-01"), 1),
        (day("2027-01-03"), 1),
        (day("2027-01-04"), 1),
        (day("2021-01-03"), 1),
        (day("2024-12-30"), 1),
        (day("2026-05-15"), 1),  # 20 entries, one user
    ],
}


def _finished_entries_per_day() -> list[tuple]:
    """The shared entry rules, in Python: finished entries per UTC day of started_at, user
    and project, with their exact microseconds."""
    groups: dict[tuple, list[int]] = {}
    for _, user, project, start, stop, *_ in SILVER_ROWS["time_entries"]:
        if stop is None or stop < start:
            continue
        counts = groups.setdefault((start.date(), user, project), [0, 0])
        counts[0] += 1
        counts[1] += (stop - start) // dt.timedelta(microseconds=1)
    return [(*key, n, D(micros)) for key, (n, micros) in groups.items()]


EXPECTED["finished_entries_per_day"] = _finished_entries_per_day()


def silver_frame(spark, table: str, rows=None):
    """A DataFrame shaped like the silver table (with _lsn, _change_index, _commit_ts)."""
    rows = SILVER_ROWS[table] if rows is None else rows
    commit = ts("2027-02-01 00:00:00")
    return spark.createDataFrame([row + (1000 + i, 0, commit) for i, row in enumerate(rows)],
                                 f"{SILVER_DDL[table]}, {META}")


def write_silver(spark, make_silver_frame: Callable, names: TableNames,
                 tables: Iterable[str]) -> None:
    """silver_frame's rows of each table into its silver table (a path, or a catalog name
    whose schema is created)."""
    for table in tables:
        target = names.silver("public", table)
        ensure_schema(spark, target)
        save_table(make_silver_frame(table).write.format("delta"), target)


def demo_gold_config(tmp_path: Path, layout: dict[str, Any]) -> Path:
    """A config of the demo's reports with silver and gold placed by `layout`; with catalog
    schemas the reports' SQL names them."""
    schemas = layout.get("databricks")
    reports = DEMO_REPORTS if not schemas else demo_reports_in(
        tmp_path / "gold", schemas["silver_schema"], schemas["gold_schema"])
    return write_config(tmp_path / "lakehouse.yml", "host=nowhere", tmp_path / "lake",
                        gold={"reports": str(reports)}, **layout)


def demo_reports_in(directory, silver_schema: str, gold_schema: str):
    """The demo's report files in `directory`, naming silver and gold by other schemas
    (a report's SQL uses the config's schema names)."""
    directory.mkdir(parents=True, exist_ok=True)
    quoted = {"lakehouse_silver.": f"`{silver_schema}`.", "lakehouse_gold.": f"`{gold_schema}`."}
    for path in DEMO_REPORTS.glob("*.sql"):
        text = path.read_text()
        for old, new in quoted.items():
            text = text.replace(old, new)
        (directory / path.name).write_text(text)
    return directory


SILVER_VIEWS = {("lakehouse_silver", table): view_name("silver", table) for table in SILVER_DDL}
