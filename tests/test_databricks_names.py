"""How the databricks engine names silver and gold (Unity Catalog) against the local engines
(Delta paths), and the exact statements each runs. No workspace is reachable here: these are
pure functions of the config. The same code paths run on Sail with three-part names in
tests/silver/test_job_unity_catalog.py, tests/gold/test_run_gold_unity_catalog.py and
tests/test_verify_unity_catalog.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pipelines.catalog import (
    CatalogSchemas, TableNames, TableRef, create_schema_sql, delta_path, quote)
from pipelines.config import load_config
from pipelines.errors import ConfigError
from pipelines.gold.io import TableGoldIO, gold_io_for
from pipelines.lake import Lake
from pipelines.silver.job import clash_error
from pipelines.silver.maintenance import DatabricksMaintenance, LocalMaintenance, maintenance_for
from pipelines.silver.merge import (
    add_columns_merge_sql, at_or_below, committed_before, delete_where_sql, insert_select_sql,
    silver_merge_sql)

ROOT = Path(__file__).resolve().parents[1]
VOLUME = "/Volumes/main/lakehouse/lake"
EVENTS = "_lakehouse_silver_events"


def bundle_overrides(task: str) -> list[str]:
    """The --set arguments a silver_gold task passes, bundle variables at their defaults."""
    defaults = {name: spec["default"] for name, spec in
                yaml.safe_load((ROOT / "databricks.yml").read_text())["variables"].items()}
    job = yaml.safe_load((ROOT / "resources" / "silver_gold.job.yml").read_text())
    [spec] = [t for t in job["resources"]["jobs"]["lakehouse_silver_gold"]["tasks"]
              if t["task_key"] == task]
    args = spec["python_wheel_task"]["parameters"]
    return [re.sub(r"\$\{var\.(\w+)\}", lambda m: defaults[m.group(1)], args[i + 1])
            for i, arg in enumerate(args) if arg == "--set"]


@pytest.fixture
def databricks():
    """The bundle's config, loaded the way the silver and gold tasks load it."""
    assert bundle_overrides("silver") == bundle_overrides("gold")
    return load_config(ROOT / "conf" / "lakehouse.databricks.yml",
                       environ={"LAKEHOUSE_SOURCE_DSN": "host=db"},
                       overrides=bundle_overrides("silver"))


@pytest.fixture
def local(tmp_path):
    path = tmp_path / "lakehouse.yml"
    path.write_text(f"source: {{dsn: x}}\nlake: {{path: {VOLUME}}}\n")
    return load_config(path, environ={})


# --- identifiers --------------------------------------------------------------------------

def test_databricks_names_silver_and_gold_in_unity_catalog(databricks):
    names = TableNames.from_config(databricks)
    assert names.schemas == CatalogSchemas("main", "lakehouse_silver", "lakehouse_gold")
    assert names.silver("public", "users").sql == "`main`.`lakehouse_silver`.`users`"
    assert names.silver("sales", "orders").sql == "`main`.`lakehouse_silver`.`sales_orders`"
    assert names.gold("hours_per_project_per_day").sql == \
        "`main`.`lakehouse_gold`.`hours_per_project_per_day`"
    assert str(names.silver("public", "users")) == "main.lakehouse_silver.users"
    assert names.silver("public", "users").path is None


def test_local_engines_name_every_table_by_its_path(local):
    names = TableNames.from_config(local)
    assert names.schemas is None
    assert names.silver("public", "users").sql == f"delta.`{VOLUME}/silver/public/users`"
    assert names.silver("sales", "orders").sql == f"delta.`{VOLUME}/silver/sales/orders`"
    assert names.gold("active_users_per_day").sql == f"delta.`{VOLUME}/gold/active_users_per_day`"
    assert str(names.silver("public", "users")) == f"{VOLUME}/silver/public/users"


@pytest.mark.parametrize("engine", ["local", "spark", "databricks"])
def test_tombstones_stay_pipeline_state_under_the_lake_on_every_engine(local, engine):
    from dataclasses import replace

    names = TableNames.from_config(replace(local, engine=engine))
    marks = names.tombstones("public", "users")
    assert marks.path.uri == f"{VOLUME}/_state/silver_tombstones/public/users"
    assert marks.sql == f"delta.`{VOLUME}/_state/silver_tombstones/public/users`"


def test_the_bundle_variables_decide_catalog_and_schemas(databricks):
    config = load_config(ROOT / "conf" / "lakehouse.databricks.yml",
                         environ={"LAKEHOUSE_SOURCE_DSN": "host=db"},
                         overrides=["databricks.catalog=dev-team", "databricks.silver_schema=s",
                                    "databricks.gold_schema=g", "lake.path=/Volumes/x/y/lake"])
    names = TableNames.from_config(config)
    assert names.silver("public", "users").sql == "`dev-team`.`s`.`users`"
    assert str(names.silver("public", "users")) == "`dev-team`.s.users"
    assert names.gold("r").sql == "`dev-team`.`g`.`r`"
    assert names.tombstones("public", "users").sql == \
        "delta.`/Volumes/x/y/lake/_state/silver_tombstones/public/users`"


@pytest.mark.parametrize("schema, table, identifier, shown", [
    ("public", "Users", "`main`.`s`.`users`", "main.s.users"),  # UC stores lower case
    ("public", "order-items", "`main`.`s`.`order-items`", "main.s.`order-items`"),
    ("My App", "Order Items", "`main`.`s`.`my_app_order_items`", "main.s.my_app_order_items"),
    ("public", "v1.2/x", "`main`.`s`.`v1_2_x`", "main.s.v1_2_x"),  # . / refused even quoted
    ("public", "tab\there", "`main`.`s`.`tab_here`", "main.s.tab_here"),
    ("public", "we`ird", "`main`.`s`.`we``ird`", "main.s.`we``ird`"),
    ("public", "ünïcode", "`main`.`s`.`ünïcode`", "main.s.`ünïcode`"),
])
def test_odd_source_names_become_valid_quoted_unity_catalog_names(schema, table, identifier,
                                                                  shown):
    names = TableNames(Lake.of(VOLUME), CatalogSchemas("main", "s", "g"))
    assert names.silver(schema, table).sql == identifier
    assert str(names.silver(schema, table)) == shown


def test_odd_names_on_paths_are_quoted_too():
    assert delta_path("/lake/silver/public/we`ird") == "delta.`/lake/silver/public/we``ird`"
    assert quote("a`b`") == "`a``b```"


@pytest.mark.parametrize("key, value", [("catalog", "main.dev"), ("silver_schema", "my schema"),
                                        ("gold_schema", "a/b"), ("catalog", "x" * 256)])
def test_catalog_and_schema_names_unity_catalog_refuses_are_config_errors(tmp_path, key, value):
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump({"source": {"dsn": "x"}, "engine": "databricks",
                                    "databricks": {key: value}}))
    with pytest.raises(ConfigError, match=rf"databricks\.{key}: got .* Unity Catalog name"):
        TableNames.from_config(load_config(path, environ={}))


def test_a_table_ref_is_a_path_or_a_name():
    with pytest.raises(ValueError, match="a path or a catalog name"):
        TableRef()
    with pytest.raises(ValueError, match="a path or a catalog name"):
        TableRef(path=Path("/x"), parts=("a", "b", "c"))
    with pytest.raises(ValueError, match="silver schema"):
        CatalogSchemas("main", "a.b", "g")


def test_source_tables_that_would_share_a_unity_catalog_table_are_found(databricks, local):
    tables = ["public.sales_orders", "sales.orders", "public.users", "public.Users",
              "public.items"]
    clashes = TableNames.from_config(databricks).silver_clashes(tables)
    assert clashes == {"public.sales_orders": ("sales.orders",),
                       "sales.orders": ("public.sales_orders",),
                       "public.Users": ("public.users",), "public.users": ("public.Users",)}
    assert TableNames.from_config(local).silver_clashes(tables) == {}
    assert clash_error("sales.orders", TableNames.from_config(databricks),
                       clashes["sales.orders"]) == (
        "its silver table main.lakehouse_silver.sales_orders would also hold "
        "public.sales_orders; leave all but one of them out of source.tables")


# --- statements ---------------------------------------------------------------------------

MERGE_USERS = """\
MERGE INTO `main`.`lakehouse_silver`.`users` t USING _lakehouse_silver_events s ON t.`id` = s.`id`
WHEN MATCHED AND s._cdc_op = 'delete' AND (s._lsn > t._lsn OR (s._lsn = t._lsn AND \
s._change_index > t._change_index)) THEN DELETE
WHEN MATCHED AND s._cdc_op = 'upsert' AND (s._lsn > t._lsn OR (s._lsn = t._lsn AND \
s._change_index > t._change_index)) THEN UPDATE SET \
`email` = CASE WHEN array_contains(s._cdc_unchanged, 'email') THEN t.`email` ELSE s.`email` END, \
`_lsn` = s.`_lsn`, `_change_index` = s.`_change_index`, `_commit_ts` = s.`_commit_ts`, \
`gone` = NULL
WHEN NOT MATCHED AND s._cdc_op = 'upsert' THEN INSERT \
(`id`, `email`, `_lsn`, `_change_index`, `_commit_ts`, `gone`) VALUES \
(s.`id`, CASE WHEN array_contains(s._cdc_unchanged, 'email') THEN NULL ELSE s.`email` END, \
s.`_lsn`, s.`_change_index`, s.`_commit_ts`, NULL)"""

FIRST_LOAD = """\
SELECT s.`id` AS `id`, CASE WHEN array_contains(s._cdc_unchanged, 'email') THEN NULL ELSE \
s.`email` END AS `email`, s.`_lsn` AS `_lsn`, s.`_change_index` AS `_change_index`, \
s.`_commit_ts` AS `_commit_ts`, NULL AS `gone` FROM _lakehouse_silver_events s \
WHERE s._cdc_op = 'upsert'"""

EXPIRE_TOMBSTONES = """\
DELETE FROM delta.`/Volumes/main/lakehouse/lake/_state/silver_tombstones/public/users` t \
WHERE t._commit_ts < timestamp_micros(1000)"""


def statements(names: TableNames) -> list[str]:
    """Every statement silver runs against the users table, as apply_table builds them."""
    silver, marks = names.silver("public", "users"), names.tombstones("public", "users")
    columns = ["id", "email", "_lsn", "_change_index", "_commit_ts", "gone"]
    return [silver_merge_sql(silver.sql, EVENTS, ["id"], columns, ["id", "email"]),
            delete_where_sql(marks.sql, committed_before(1000)),
            delete_where_sql(silver.sql, at_or_below((16, 0))),
            add_columns_merge_sql(silver.sql, EVENTS),
            insert_select_sql(EVENTS, ["id"], columns, ["id", "email"]),
            delete_where_sql(silver.sql, at_or_below((16, 0)), EVENTS)]


def test_the_exact_statements_on_databricks(databricks):
    merge, expire, floor, evolve, first_load, connect_floor = statements(
        TableNames.from_config(databricks))
    assert merge == MERGE_USERS
    assert expire == EXPIRE_TOMBSTONES
    assert floor == ("DELETE FROM `main`.`lakehouse_silver`.`users` t WHERE "
                     "(t._lsn < 16 OR (t._lsn = 16 AND t._change_index <= 0))")
    # through Spark Connect (the server may be Sail's, which has no DELETE): a MERGE
    assert connect_floor == ("MERGE INTO `main`.`lakehouse_silver`.`users` t USING "
                             "_lakehouse_silver_events s ON FALSE\nWHEN NOT MATCHED BY SOURCE "
                             "AND (t._lsn < 16 OR (t._lsn = 16 AND t._change_index <= 0)) "
                             "THEN DELETE")
    assert evolve == ("MERGE WITH SCHEMA EVOLUTION INTO `main`.`lakehouse_silver`.`users` t "
                      "USING _lakehouse_silver_events s ON FALSE WHEN NOT MATCHED THEN INSERT *")
    assert first_load == FIRST_LOAD  # written into a new table by saveAsTable


def test_local_statements_are_the_same_text_with_the_path_as_target(databricks, local):
    unity, paths = TableNames.from_config(databricks), TableNames.from_config(local)
    unity_users = unity.silver("public", "users").sql
    path_users = paths.silver("public", "users").sql
    assert path_users == f"delta.`{VOLUME}/silver/public/users`"
    for on_databricks, on_local in zip(statements(unity), statements(paths), strict=True):
        assert on_local.startswith(("MERGE INTO delta.`", "DELETE FROM delta.`",
                                    "MERGE WITH SCHEMA EVOLUTION INTO delta.`", "SELECT "))
        assert on_local.replace(path_users, unity_users) == on_databricks


def test_the_schema_of_a_catalog_table_is_created_if_missing(databricks, local):
    names = TableNames.from_config(databricks)
    assert create_schema_sql(names.silver("public", "users")) == \
        "CREATE SCHEMA IF NOT EXISTS `main`.`lakehouse_silver`"
    assert create_schema_sql(names.gold("r")) == \
        "CREATE SCHEMA IF NOT EXISTS `main`.`lakehouse_gold`"
    with pytest.raises(ValueError, match="addressed by path"):
        create_schema_sql(TableNames.from_config(local).silver("public", "users"))


# --- adapters chosen by the engine (no Spark action) --------------------------------------

def test_gold_io_and_maintenance_follow_the_engine(databricks, local):
    unity, paths = gold_io_for(databricks, None), gold_io_for(local, None)
    assert isinstance(unity, TableGoldIO) and unity.names == TableNames.from_config(databricks)
    assert unity.report_location("active_users_per_day") == \
        "main.lakehouse_gold.active_users_per_day"
    assert paths.report_location("active_users_per_day") == f"{VOLUME}/gold/active_users_per_day"
    assert isinstance(maintenance_for(databricks, None), DatabricksMaintenance)
    assert isinstance(maintenance_for(local, None), LocalMaintenance)


def test_layout_statements_cluster_catalog_tables_by_key_and_turn_on_deletion_vectors():
    from pipelines.silver.maintenance import layout_statements

    table = "`main`.`lakehouse_silver`.`project_members`"
    assert layout_statements(table, ["project_id", "user_id"], True, [], {}) == [
        f"ALTER TABLE {table} CLUSTER BY (`project_id`, `user_id`)",
        f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)"]
    done = {"delta.enableDeletionVectors": "true"}
    assert layout_statements(table, ["project_id", "user_id"], True,
                             ["project_id", "user_id"], done) == []
    assert layout_statements(table, ["id"], False, ["id"], {}) == []  # the workspace decides
