from pathlib import Path

import pytest

from pipelines.config import DSN_ENV, load_config
from pipelines.errors import ConfigError

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
    assert config.lake.path == (tmp_path / "lake").resolve()
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
])
def test_invalid_config_names_key_value_and_expectation(tmp_path, text, message):
    with pytest.raises(ConfigError, match=None) as info:
        load_config(write(tmp_path, text), environ={})
    assert message in str(info.value)


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


@pytest.mark.parametrize("url", ["s3://bucket/lake", "abfss://c@acct.dfs.core.windows.net/l",
                                 "dbfs:/mnt/lake"])
def test_object_store_lake_paths_are_refused_not_mangled(tmp_path, url):
    with pytest.raises(ConfigError, match=f"lake.path: got '{url}'"):
        load_config(write(tmp_path, GOOD.replace("./lake", url)), environ={})


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
