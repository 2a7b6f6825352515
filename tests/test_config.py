from pathlib import Path

import pytest

from pipelines.config import DSN_ENV, load_config
from pipelines.errors import ConfigError
from pipelines.lake import Lake

GOOD = """
source:
  dsn: host=localhost dbname=app
  slot: lakehouse
  publication: lakehouse
  tables: [public.users, time_entries]
lake: {path: ./lake}
engine: local
ingest: {batch_rows: 1000, batch_seconds: 0.5}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lakehouse.yml"
    path.write_text(text)
    return path


def test_good_file_loads_into_dataclasses(tmp_path):
    config = load_config(write(tmp_path, GOOD), environ={})
    assert config.source.tables == ("public.users", "public.time_entries")
    assert config.lake.path == str((tmp_path / "lake").resolve())
    assert config.ingest.batch_rows == 1000 and config.ingest.batch_seconds == 0.5
    assert config.backfill.chunk_size == 50_000  # default kept
    with pytest.raises(AttributeError):
        config.engine = "spark"  # frozen


def test_dsn_from_environment_wins(tmp_path):
    config = load_config(write(tmp_path, GOOD), environ={DSN_ENV: "host=db password=s3cret"})
    assert config.source.dsn == "host=db password=s3cret"


def test_config_path_from_environment(tmp_path):
    path = write(tmp_path, GOOD)
    config = load_config(None, environ={"LAKEHOUSE_CONFIG": str(path)})
    assert config.source.slot == "lakehouse"


@pytest.mark.parametrize("text, message", [
    (GOOD + "extra: 1\n", "extra: unknown setting"),
    (GOOD.replace("batch_rows: 1000", "batch_rows: many"),
     "ingest.batch_rows: got 'many', expected a positive whole number"),
    (GOOD.replace("engine: local", "engine: flink"), "engine: got 'flink', expected one of"),
    (GOOD.replace("slot: lakehouse", "slot: Bad-Slot"), "source.slot: got 'Bad-Slot'"),
    (GOOD.replace("  dsn: host=localhost dbname=app\n", ""), "source.dsn is missing"),
    (GOOD.replace("tables: [public.users, time_entries]", "tables: 5"),
     "source.tables: got 5, expected"),
    (GOOD.replace("lake: {path: ./lake}", "lake: [1]"), "lake: got [1], expected a mapping"),
    ("source: [\n", "is not valid YAML"),
    (GOOD + "silver: {copy_on_write_mb: -1}\n",
     "silver.copy_on_write_mb: got -1, expected a whole number, 0 or more"),
    (GOOD + "gold: {parallel_reports: 0}\n",
     "gold.parallel_reports: got 0, expected a positive whole number"),
])
def test_invalid_config_names_key_value_and_expectation(tmp_path, text, message):
    with pytest.raises(ConfigError, match=None) as info:
        load_config(write(tmp_path, text), environ={})
    assert message in str(info.value)


def test_copy_on_write_can_be_turned_off(tmp_path):
    config = load_config(write(tmp_path, GOOD + "silver: {copy_on_write_mb: 0}\n"), environ={})
    assert config.silver.copy_on_write_mb == 0


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.yml", environ={})


def test_overrides_apply_before_validation(tmp_path):
    path = write(tmp_path, GOOD)
    config = load_config(path, environ={}, overrides=[
        "engine=databricks", "databricks.catalog=prod", "ingest.batch_rows=7",
        "lake.path=/Volumes/main/cdc/lake"])
    assert config.engine == "databricks" and config.databricks.catalog == "prod"
    assert config.ingest.batch_rows == 7
    assert str(config.lake.path) == "/Volumes/main/cdc/lake"
    with pytest.raises(ConfigError, match="ingest.batch_rows: got 'x'"):
        load_config(path, environ={}, overrides=["ingest.batch_rows=x"])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config(path, environ={}, overrides=["engine"])
    with pytest.raises(ConfigError, match="LAKEHOUSE_SOURCE_DSN"):
        load_config(path, environ={}, overrides=["source.dsn=host=x password=y"])
    with pytest.raises(ConfigError, match="LAKEHOUSE_SOURCE_DSN"):
        load_config(path, environ={}, overrides=["source={dsn: 'host=x password=y'}"])


def with_lake(path: str, *options: str) -> str:
    """GOOD with the lake at `path` and these storage_options lines."""
    block = f"lake:\n  path: {path}\n  storage_options:\n" + "".join(f"    {o}\n" for o in options)
    return GOOD.replace("lake: {path: ./lake}\n", block)


@pytest.mark.parametrize("url", ["s3://bucket/lake", "s3a://bucket/lake", "az://container/lake",
                                 "abfss://c@acct.dfs.core.windows.net/l", "gs://bucket/lake"])
def test_object_store_urls_are_kept_as_given(tmp_path, url):
    config = load_config(write(tmp_path, GOOD.replace("./lake", url + "/")), environ={})
    assert config.lake.path == url  # not resolved against the config's directory


@pytest.mark.parametrize("url", ["dbfs:/mnt/lake", "http://host/lake", "s3:/bucket"])
def test_other_urls_are_refused_with_the_accepted_forms(tmp_path, url):
    with pytest.raises(ConfigError, match=f"lake.path: got '{url}'.*s3://bucket/prefix"):
        load_config(write(tmp_path, GOOD.replace("./lake", url)), environ={})


def test_storage_options_take_delta_rs_names_and_plain_values(tmp_path):
    text = with_lake("s3://lake/prefix", "aws_endpoint_url: http://127.0.0.1:9000", "aws_allow_http: true")
    config = load_config(write(tmp_path, text), environ={})
    assert config.lake.storage_options == {"aws_endpoint_url": "http://127.0.0.1:9000",
                                           "aws_allow_http": "true"}


@pytest.mark.parametrize("key", ["aws_secret_access_key", "AWS_ACCESS_KEY_ID", "aws_session_token",
                                 "azure_storage_account_key", "azure_client_secret",
                                 "azure_storage_sas_key", "google_service_account_key"])
def test_credentials_in_storage_options_are_refused(tmp_path, key):
    text = with_lake("s3://lake", f"{key}: x")
    with pytest.raises(ConfigError, match="credentials never go in the config file"):
        load_config(write(tmp_path, text), environ={})


def test_a_store_without_conditional_writes_is_refused(tmp_path):
    text = with_lake("s3://lake", "aws_s3_allow_unsafe_rename: true")
    with pytest.raises(ConfigError, match="conditional writes"):
        load_config(write(tmp_path, text), environ={})


def with_retention(value: str, path: str = "./lake") -> str:
    """GOOD with the lake at `path` keeping `value` of Delta log."""
    return GOOD.replace("lake: {path: ./lake}", f"lake: {{path: '{path}', log_retention: {value}}}")


@pytest.mark.parametrize("value, retention", [
    ("7 days", "interval 7 days"), ("36 hours", "interval 36 hours"), ("1 Day", "interval 1 day"),
    ("interval 2 weeks", "interval 2 weeks"), ("'0 seconds'", "interval 0 seconds")])
def test_log_retention_is_a_duration_kept_as_delta_spells_it(tmp_path, value, retention):
    for path in ("./lake", "s3://bucket/lake"):
        config = load_config(write(tmp_path, with_retention(value, path)), environ={})
        assert config.lake.log_retention == retention
        lake = Lake.from_config(config)
        assert lake.backfills.retention_properties == {"delta.logRetentionDuration": retention}
        assert lake == Lake.of(lake.root) and lake.backfills == Lake.of(lake.root).backfills


def test_log_retention_is_ten_minutes_on_every_store_unless_set(tmp_path):
    for path in ("./lake", "s3://bucket/lake", "/Volumes/main/cdc/lake"):
        config = load_config(write(tmp_path, GOOD.replace("./lake", path)), environ={})
        assert config.lake.log_retention == "interval 10 minutes"
        assert Lake.from_config(config).bronze_changes.log_retention == "interval 10 minutes"
    config = load_config(write(tmp_path, GOOD), environ={},
                         overrides=["lake.log_retention=2 days"])
    assert Lake.from_config(config).bronze_changes.log_retention == "interval 2 days"


@pytest.mark.parametrize("value", ["1 month", "forever", "-1 days", "1.5 hours", "10", "''",
                                   "7 days ago", "interval 1 day 2 hours", "[7 days]"])
def test_a_bad_log_retention_names_the_key_and_the_forms_it_takes(tmp_path, value):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, with_retention(value)), environ={})
    assert str(info.value).startswith("lake.log_retention: got ")
    assert "expected a duration such as '10 minutes', '36 hours' or '7 days'" in str(info.value)


def test_classic_spark_needs_abfss_for_azure(tmp_path):
    text = GOOD.replace("./lake", "az://container/lake") + "engine: spark\n"
    with pytest.raises(ConfigError, match="use abfss://"):
        load_config(write(tmp_path, text), environ={})


def test_spark_conf_passes_any_property_spelled_as_spark_spells_it(tmp_path):
    text = GOOD + ("spark:\n  master: spark://10.0.0.5:7077\n  conf:\n"
                   "    spark.executor.memory: 8g\n    spark.cores.max: 16\n"
                   "    spark.sql.adaptive.enabled: true\n")
    config = load_config(write(tmp_path, text), environ={})
    assert config.spark.master == "spark://10.0.0.5:7077"
    assert config.spark.conf == {"spark.executor.memory": "8g", "spark.cores.max": "16",
                                 "spark.sql.adaptive.enabled": "true"}
    with pytest.raises(ConfigError, match="spark.conf: got .*expected a mapping of Spark"):
        load_config(write(tmp_path, GOOD + "spark: {conf: [spark.x]}\n"), environ={})
    with pytest.raises(ConfigError, match="spark.conf: got .*expected a mapping of Spark"):
        load_config(write(tmp_path, GOOD + "spark: {conf: {spark.x: [1]}}\n"), environ={})


def test_connect_takes_an_sc_url_and_session_settings(tmp_path):
    text = GOOD.replace("engine: local", "engine: connect") + (
        "connect:\n  url: sc://spark.internal:15002/;use_ssl=true\n"
        "  conf: {spark.sql.shuffle.partitions: 8}\n")
    config = load_config(write(tmp_path, text), environ={})
    assert config.connect.url == "sc://spark.internal:15002/;use_ssl=true"
    assert config.connect.conf == {"spark.sql.shuffle.partitions": "8"}


@pytest.mark.parametrize("url, message", [
    ("http://spark:15002", "connect.url: got 'http://spark:15002', expected sc://host:port"),
    ("sc://spark:15002/;use_ssl=true;token=abc", "tokens come only from the environment"),
])
def test_connect_refuses_other_urls_and_a_token_in_the_file(tmp_path, url, message):
    text = GOOD.replace("engine: local", "engine: connect") + f"connect: {{url: '{url}'}}\n"
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert message in str(info.value)
    assert "abc" not in str(info.value)


def test_connect_without_an_endpoint_names_both_ways_to_give_one(tmp_path, monkeypatch):
    from pipelines.engine import connect_session

    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    with pytest.raises(ConfigError, match="set connect.url .* or SPARK_REMOTE"):
        connect_session("")


def test_history_names_tables_and_their_tracked_columns(tmp_path):
    config = load_config(write(tmp_path, GOOD.replace("  tables:", "  failover_slot: false\n  tables:")
                               + "silver:\n  history: [time_entries, sales.orders]\n"
                               "  history_columns: {time_entries: [billable, project_id]}\n"),
                         environ={})
    assert config.source.failover_slot is False  # kept when the table names are qualified
    assert config.silver.history == ("public.time_entries", "sales.orders")
    assert config.silver.keeps_history("sales.orders")
    assert not config.silver.keeps_history("public.users")
    assert config.silver.tracked_columns("public.time_entries") == ("billable", "project_id")
    assert config.silver.tracked_columns("sales.orders") is None
    every = load_config(write(tmp_path, GOOD + "silver: {history: '*'}\n"), environ={})
    assert every.silver.keeps_history("public.users")


@pytest.mark.parametrize("text, message", [
    ("silver: {history: public.users}\n", "silver.history: got 'public.users', expected"),
    ("silver: {history: [a.b.c]}\n", "silver.history: got 'a.b.c', expected schema.table"),
    ("silver: {history_columns: {users: email}}\n", "silver.history_columns: got"),
    ("silver: {history_columns: {users: []}}\n", "silver.history_columns: got"),
])
def test_bad_history_settings_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, GOOD + text), environ={})
