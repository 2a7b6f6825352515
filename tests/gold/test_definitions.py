"""Report files read and checked without Spark: header, names, dependency order, errors."""

from pathlib import Path

import pytest

from pipelines.demo.run import DEMO_REPORTS
from pipelines.errors import ConfigError
from pipelines.gold.definitions import load_reports, parse_columns


def reports_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    directory = tmp_path / "gold"
    directory.mkdir(exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


def load(directory: Path):
    return load_reports(directory, "lakehouse_silver", "lakehouse_gold")


def test_header_and_tables_of_a_report(tmp_path):
    directory = reports_dir(tmp_path, {"per_client.sql": (
        "\n-- description: users per client\n"
        "-- columns: client_id int, users bigint,\n"
        "-- columns: amounts map<string, decimal(18,4)>\n"
        "-- display order: users desc, client_id\n"
        "-- Note: this line is SQL's own comment, not the header\n"
        "SELECT u.client_id, count(*) AS users, map() AS amounts\n"
        "FROM lakehouse_silver.users u JOIN `LAKEHOUSE_SILVER`.`Clients` ON true\n"
        "GROUP BY u.client_id;\n")})
    [report] = load(directory).reports
    assert report.name == "per_client" and report.description == "users per client"
    assert report.columns == (("client_id", "int"), ("users", "bigint"),
                              ("amounts", "map<string, decimal(18,4)>"))
    assert report.display_order == ("users desc", "client_id")
    assert sorted(report.silver) == ["clients", "users"] and report.gold == ()
    views = {("lakehouse_silver", "users"): "_v_users", ("lakehouse_silver", "clients"): "_v_c"}
    sql = report.rewritten(views)
    assert sql.splitlines()[7] == ("FROM `_v_users` u JOIN `_v_c` AS `clients` ON true")
    assert not sql.rstrip().endswith(";")
    assert sql.count("\n") == 8  # the header stays as blank lines: the file's line numbers


def test_reports_run_after_the_reports_they_read(tmp_path):
    directory = reports_dir(tmp_path, {
        "a_top.sql": "SELECT * FROM lakehouse_gold.m_middle",
        "m_middle.sql": "WITH b AS (SELECT * FROM lakehouse_gold.z_base) SELECT * FROM b",
        "z_base.sql": "SELECT id FROM lakehouse_silver.users",
        "other.sql": "SELECT 1 AS one",
    })
    reports = load(directory)
    assert reports.names == ("other", "z_base", "m_middle", "a_top")
    assert reports.get("a_top").gold == ("m_middle",)
    assert [r.name for r in reports.select(["a_top", "z_base"])] == ["z_base", "a_top"]
    with pytest.raises(ConfigError, match=r"unknown gold report\(s\) nope"):
        reports.select(["nope"])


def test_the_demo_reports():
    reports = load(DEMO_REPORTS)
    assert reports.names == ("active_users_per_day", "billable_per_client_per_month",
                             "finished_entries_per_day", "hours_per_project_per_day",
                             "hours_per_user_per_week")
    assert all(r.columns and r.description and r.display_order for r in reports.reports)
    assert reports.get("hours_per_user_per_week").silver == ("users",)
    assert reports.get("hours_per_user_per_week").gold == ("finished_entries_per_day",)
    incremental = {r.name: (r.incremental.column, r.incremental.table)
                   for r in reports.reports if r.incremental}
    assert incremental == {"active_users_per_day": ("day", "time_entries"),
                           "billable_per_client_per_month": ("month", "time_entries"),
                           "finished_entries_per_day": ("day", "time_entries")}


def test_an_incremental_column_is_traced_to_a_row_expression(tmp_path):
    directory = reports_dir(tmp_path, {"per_day.sql": (
        "-- incremental by: day\n"
        "WITH e AS (SELECT user_id, started_at + INTERVAL 1 HOUR AS shifted\n"
        "           FROM lakehouse_silver.time_entries)\n"
        "SELECT to_date(x.shifted) AS day, u.email, count(*) AS n\n"
        "FROM e x JOIN lakehouse_silver.users u ON u.id = x.user_id\n"
        "GROUP BY 1, 2")})
    [report] = load(directory).reports
    assert report.incremental.table == "time_entries"
    assert report.incremental.expression == \
        "TO_DATE((`started_at` + INTERVAL '1' HOUR))"


@pytest.mark.parametrize("files, message", [
    ({"a.sql": "SELECT * FROM lakehouse_gold.b", "b.sql": "SELECT * FROM lakehouse_gold.a"},
     r"read each other in a cycle: (a.sql -> b.sql -> a.sql|b.sql -> a.sql -> b.sql)"),
    ({"a.sql": "SELECT * FROM lakehouse_gold.a"}, r"a.sql: it reads itself"),
    ({"a.sql": "SELECT * FROM lakehouse_gold.nope"},
     r"a.sql: lakehouse_gold.nope is not a report in "),
    ({"a.sql": "\nSELECT * FROM users"},
     r"a.sql:2: table 'users' has no schema: write lakehouse_silver.users"),
    ({"a.sql": "SELECT * FROM public.users"}, r"a.sql:1: public.users is neither a silver"),
    ({"a.sql": "SELECT * FROM main.lakehouse_silver.users"}, r"a.sql:1: .* is neither"),
    ({"a.sql": "SELECT lakehouse_silver.users.id FROM lakehouse_silver.users"},
     r"a.sql: column .* names its table with the schema"),
    ({"a.sql": "-- descripton: typo\nSELECT 1"},
     r"a.sql:1: unknown header key 'descripton', expected one of description, columns"),
    ({"a.sql": "-- description: x\n-- description: y\nSELECT 1"}, r"a.sql:2: description is given twice"),
    ({"a.sql": "-- columns: n integr\nSELECT 1 AS n"},
     r"a.sql: columns: n has type 'integr', which is not a Spark SQL type"),
    ({"a.sql": "-- columns: n int, n bigint\nSELECT 1 AS n"}, r"a.sql: columns: n declared twice"),
    ({"a.sql": "-- columns: int\nSELECT 1 AS n"}, r"a.sql: columns: expected `name type`"),
    ({"a.sql": "-- display order: n sideways\nSELECT 1 AS n"}, r"a.sql: display order: expected"),
    ({"a.sql": "SELECT 1; SELECT 2"}, r"a.sql: expected one SELECT query, got 2 statements"),
    ({"a.sql": "INSERT INTO lakehouse_gold.b SELECT 1"}, r"a.sql: expected one SELECT query, got INSERT"),
    ({"a.sql": "SELECT FROM WHERE ("}, r"a.sql:1: the SQL does not parse: "),
    ({"Bad-Name.sql": "SELECT 1"}, r"Bad-Name.sql: the file name is the report's table name"),
    ({"a.sql": "-- incremental by: day, user\nSELECT 1 AS day"},
     r"a.sql: incremental by: expected one column name, got 'day, user'"),
    ({"a.sql": "-- columns: t timestamp\n-- incremental by: t\n"
               "SELECT created_at AS t FROM lakehouse_silver.users"},
     r"a.sql: incremental by t: its declared type is timestamp; a group column is one of"),
    ({"a.sql": "-- incremental by: nope\nSELECT id FROM lakehouse_silver.users"},
     r"a.sql: incremental by nope: not a column of the query"),
    ({"a.sql": "-- incremental by: n\nSELECT count(*) AS n FROM lakehouse_silver.users"},
     r"a.sql: incremental by n: the column is computed with COUNT\(\*\), not from one row"),
    ({"a.sql": "-- incremental by: d\nSELECT day AS d FROM lakehouse_gold.b",
      "b.sql": "SELECT 1 AS day"},
     r"a.sql: incremental by d: the column comes from the report b"),
    ({"a.sql": "-- incremental by: k\nSELECT u.id + c.id AS k FROM lakehouse_silver.users u "
               "JOIN lakehouse_silver.clients c ON true"},
     r"a.sql: incremental by k: the column must be computed from the columns of one silver "
     r"table, it comes from silver clients, silver users"),
    ({"a.sql": "-- incremental by: k\nSELECT a.id AS k FROM lakehouse_silver.users a "
               "JOIN lakehouse_silver.users b ON a.id = b.manager_id"},
     r"a.sql: incremental by k: the report reads users more than once"),
    ({"a.sql": "-- incremental by: k\nSELECT id AS k FROM lakehouse_silver.users "
               "UNION ALL SELECT id FROM lakehouse_silver.users"},
     r"a.sql: incremental by k: .*(more than once|cannot tell where)"),
])
def test_a_bad_report_directory_is_a_config_error_naming_the_file(tmp_path, files, message):
    with pytest.raises(ConfigError, match=message) as error:
        load(reports_dir(tmp_path, files))
    assert error.value.exit_code == 2
    assert str(tmp_path / "gold") in str(error.value)


def test_column_types_split_at_top_level_commas():
    assert parse_columns("a decimal(18,4), b struct<x:int, y:array<string>>, c string", "f") == (
        ("a", "decimal(18,4)"), ("b", "struct<x:int, y:array<string>>"), ("c", "string"))
