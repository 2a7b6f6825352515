"""The pipeline's one configuration: a YAML file loaded once into frozen dataclasses.

Validation names the key, the bad value and what was expected, so a typo in a job's
config fails at start-up with exit 2 instead of halfway through a backfill. Secrets
come from the environment only (`LAKEHOUSE_SOURCE_DSN`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from pipelines import storage
from pipelines.errors import ConfigError
from pipelines.lake import LOG_RETENTION, parse_log_retention
from pipelines.names import qualify_table

CONFIG_ENV = "LAKEHOUSE_CONFIG"
DSN_ENV = "LAKEHOUSE_SOURCE_DSN"
ENGINES = ("local", "spark", "connect", "databricks")
ALL_TABLES = "*"
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_$]*$")
_QUALIFIED = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*\.[A-Za-z_][A-Za-z0-9_$]*$")


@dataclass(frozen=True)
class SourceConfig:
    """The Postgres database to capture and the replication objects it uses."""

    dsn: str
    slot: str = "lakehouse"
    publication: str = "lakehouse"
    tables: tuple[str, ...] | str = ALL_TABLES  # "schema.table" names, or "*" for all
    failover_slot: bool = True  # Postgres 17+: the slot survives a promotion (lineage.py)


@dataclass(frozen=True)
class LakeConfig:
    """Where the Delta tables live (an absolute path or a store URL); every table's
    location derives from it (pipelines.lake)."""

    path: str = "lake"
    storage_options: Mapping[str, str] = field(default_factory=dict)  # delta-rs names
    # Delta log kept (time travel), as Delta spells it: "interval 10 minutes"
    log_retention: str = LOG_RETENTION


@dataclass(frozen=True)
class IngestConfig:
    """Micro-batching of the change stream into bronze."""

    batch_rows: int = 50_000  # flush bronze after this many changes ...
    batch_seconds: float = 1.0  # ... or this long after the first buffered change
    status_interval_seconds: float = 10.0  # standby status updates and progress lines
    spill_rows: int = 100_000  # a streamed transaction larger than this spills to disk


@dataclass(frozen=True)
class BackfillConfig:
    """DBLog snapshot chunking."""

    chunk_size: int = 50_000
    parallel: int = 1


@dataclass(frozen=True)
class SilverConfig:
    """Silver's loop (a run as soon as bronze has new commits), table layout and
    tombstone retention."""

    interval_seconds: float = 1.0  # the least time between the starts of two runs
    poll_seconds: float = 0.5  # how often an idle loop looks for a new bronze commit
    tombstone_retention_hours: float = 168.0
    max_batch_rows: int = 2_000_000  # more new bronze is applied in slices (silver/slicing.py)
    parallel_tables: int = 4  # tables whose batches a run applies at once
    deletion_vectors: bool = True  # merge-on-read: a MERGE writes only the rows it changes
    compact_files: int = 50  # compact a table once it has this many small files
    target_file_mb: int = 16  # compaction packs smaller files into files of about this size
    copy_on_write_mb: int = 8  # a classic driver's MERGE rewrites tables up to this size
    history: tuple[str, ...] | str = ()  # tables with a history table (silver/history.py)
    history_columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def keeps_history(self, table: str) -> bool:
        """Whether the source table schema.table has a history table."""
        return self.history == ALL_TABLES or table in self.history

    def tracked_columns(self, table: str) -> tuple[str, ...] | None:
        """The columns whose change opens a new version (None: every column)."""
        return self.history_columns.get(table)


@dataclass(frozen=True)
class SparkConfig:
    """Classic PySpark settings for the `spark` engine."""

    master: str = "local[*]"
    jars: tuple[str, ...] = ()  # local delta-spark/delta-storage jars instead of Maven
    conf: Mapping[str, str] = field(default_factory=dict)  # any other Spark properties


@dataclass(frozen=True)
class ConnectConfig:
    """An existing Spark Connect endpoint for the `connect` engine. A token never sits
    here: PySpark reads it from $SPARK_CONNECT_AUTHENTICATE_TOKEN (or from $SPARK_REMOTE,
    which may stand in for `url`)."""

    url: str = ""  # sc://host:port[/;param=value...]; empty: $SPARK_REMOTE
    conf: Mapping[str, str] = field(default_factory=dict)  # session settings sent on connect


@dataclass(frozen=True)
class DatabricksConfig:
    """Unity Catalog names used by the `databricks` engine."""

    catalog: str = "main"
    silver_schema: str = "lakehouse_silver"
    gold_schema: str = "lakehouse_gold"
    history_schema: str = "lakehouse_history"


@dataclass(frozen=True)
class GoldConfig:
    """Where the user's gold reports are (pipelines/gold/definitions.py): a directory of
    `<report>.sql` files, absolute after loading (relative to the config file). None: no
    reports, so `run` and `silver_gold` have no gold step."""

    reports: str | None = None
    parallel_reports: int = 4  # reports one run refreshes at once (pipelines/gold/run.py)


@dataclass(frozen=True)
class MetricsConfig:
    """The Prometheus endpoints of the long-running verbs (pipelines/metrics.py): `port` is
    the service's (`ingest`, or `run`), `silver_port` that of `silver --continuous`, so one
    config serves both on one machine; no port: no endpoint. `--metrics-port` overrides
    either; `backfill` (a one-off run) serves only on its flag."""

    port: int | None = None  # 1-65535
    silver_port: int | None = None  # 1-65535
    address: str = "0.0.0.0"  # the interface to listen on; 127.0.0.1: this machine only


@dataclass(frozen=True)
class Config:
    """Everything a pipeline command needs, validated."""

    source: SourceConfig
    lake: LakeConfig = field(default_factory=LakeConfig)
    engine: str = "local"
    ingest: IngestConfig = field(default_factory=IngestConfig)
    backfill: BackfillConfig = field(default_factory=BackfillConfig)
    silver: SilverConfig = field(default_factory=SilverConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    connect: ConnectConfig = field(default_factory=ConnectConfig)
    databricks: DatabricksConfig = field(default_factory=DatabricksConfig)
    gold: GoldConfig = field(default_factory=GoldConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)


def load_config(path: str | os.PathLike[str] | None = None,
                environ: Mapping[str, str] | None = None,
                overrides: Sequence[str] = ()) -> Config:
    """Load and validate the config file (`path`, else $LAKEHOUSE_CONFIG).

    `overrides` are "section.key=value" strings (the CLI's --set), applied before
    validation; values are parsed as YAML scalars, so numbers stay numbers.
    """
    env = os.environ if environ is None else environ
    path = path or env.get(CONFIG_ENV)
    if not path:
        raise ConfigError(f"no config file: pass --config PATH or set {CONFIG_ENV}")
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {file} is not valid YAML: {exc}") from exc
    for override in overrides:
        raw = _apply_override(raw, override)
    return parse_config(raw, base_dir=file.resolve().parent, environ=env)


def _apply_override(raw: Any, override: str) -> dict:
    key, sep, value = override.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise ConfigError(f"--set {override!r}: expected section.key=value")
    if parts in (["source"], ["source", "dsn"]):  # a whole section could carry a dsn
        raise ConfigError(f"--set source.dsn: pass secrets through {DSN_ENV}, not arguments "
                          "(they show up in process lists and job run pages)")
    result = dict(_mapping(raw, "config"))
    node = result
    for part in parts[:-1]:
        child = node.get(part, {})
        node[part] = dict(_mapping(child, part))
        node = node[part]
    try:
        node[parts[-1]] = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {override!r}: value is not valid YAML: {exc}") from exc
    return result


def parse_config(raw: Any, base_dir: Path, environ: Mapping[str, str]) -> Config:
    """Validate a parsed YAML document; relative lake paths resolve against `base_dir`."""
    top = _mapping(raw, "config")
    _reject_unknown(top, Config, "")
    source = dict(_mapping(top.get("source"), "source"))
    if environ.get(DSN_ENV):
        source["dsn"] = environ[DSN_ENV]
    if not source.get("dsn"):
        raise ConfigError(f"source.dsn is missing: set {DSN_ENV} in the environment "
                          "(preferred, keeps the password out of files) or source.dsn")
    source_cfg = _section(SourceConfig, source, "source")
    _check_name(source_cfg.slot, "source.slot")
    _check_name(source_cfg.publication, "source.publication")
    source_cfg = _with_tables(source_cfg)

    engine = top.get("engine", "local")
    if engine not in ENGINES:
        raise ConfigError(f"engine: got {engine!r}, expected one of {', '.join(ENGINES)}")
    lake = _lake(_mapping(top.get("lake", {}), "lake"), base_dir, engine)
    return Config(
        source=source_cfg,
        lake=lake,
        engine=engine,
        ingest=_section(IngestConfig, _mapping(top.get("ingest", {}), "ingest"), "ingest"),
        backfill=_section(BackfillConfig, _mapping(top.get("backfill", {}), "backfill"), "backfill"),
        silver=_section(SilverConfig, _mapping(top.get("silver", {}), "silver"), "silver"),
        spark=_section(SparkConfig, _mapping(top.get("spark", {}), "spark"), "spark"),
        connect=_connect(_mapping(top.get("connect", {}), "connect")),
        databricks=_section(DatabricksConfig, _mapping(top.get("databricks", {}), "databricks"),
                            "databricks"),
        gold=_gold(_mapping(top.get("gold", {}), "gold"), base_dir),
        metrics=_section(MetricsConfig, _mapping(top.get("metrics", {}), "metrics"), "metrics"),
    )


def _connect(values: Mapping[str, Any]) -> ConnectConfig:
    connect = _section(ConnectConfig, values, "connect")
    if connect.url and not connect.url.startswith("sc://"):
        raise ConfigError(f"connect.url: got {connect.url!r}, expected sc://host:port")
    if re.search(r";\s*token\s*=", connect.url):
        raise ConfigError("connect.url carries a token: tokens come only from the "
                          "environment (SPARK_CONNECT_AUTHENTICATE_TOKEN, or SPARK_REMOTE)")
    return connect


def _lake(values: Mapping[str, Any], base_dir: Path, engine: str) -> LakeConfig:
    """A store URL as given; a file system path made absolute against `base_dir`."""
    lake = _section(LakeConfig, values, "lake")
    path = lake.path.rstrip("/") if storage.store_kind(lake.path) else lake.path
    storage.check_lake_url(path)
    if engine == "spark":
        storage.check_spark_url(path)
    if not storage.store_kind(path):
        local = Path(path).expanduser()
        path = str(local if local.is_absolute() else (base_dir / local).resolve())
    return LakeConfig(path, storage.check_storage_options(lake.storage_options),
                      lake.log_retention)


def _gold(values: Mapping[str, Any], base_dir: Path) -> GoldConfig:
    """The reports directory made absolute against `base_dir`. It must exist: a typo would
    otherwise mean a pipeline that silently builds no gold. Its files are read by the verbs
    that build gold, so a bad report never stops `ingest` or `setup`."""
    gold = _section(GoldConfig, values, "gold")
    if gold.reports is None:
        return gold
    if not isinstance(gold.reports, str) or not gold.reports:
        raise ConfigError(f"gold.reports: got {gold.reports!r}, expected a directory of "
                          "<report>.sql files")
    if storage.store_kind(gold.reports):
        raise ConfigError(f"gold.reports: got {gold.reports!r}; reports are files shipped "
                          "with the config, expected a local directory")
    directory = Path(gold.reports).expanduser()
    directory = directory if directory.is_absolute() else (base_dir / directory).resolve()
    if not directory.is_dir():
        raise ConfigError(f"gold.reports: {directory} is not a directory")
    return replace(gold, reports=str(directory))


def configured_tables(config: Config, tables: Sequence[str] | None) -> list[str] | None:
    """The run's scope as schema.table names (None: every table bronze holds)."""
    wanted = None if not tables else [qualify_table(t) for t in tables]
    if config.source.tables == ALL_TABLES:
        return wanted
    configured = list(config.source.tables)
    if wanted is None:
        return configured
    unknown = sorted(set(wanted) - set(configured))
    if unknown:
        raise ConfigError(f"--table {', '.join(unknown)}: not in source.tables "
                          f"({', '.join(configured)})")
    return wanted


def _mapping(value: Any, key: str) -> Mapping[str, Any]:
    if value is None:
        raise ConfigError(f"{key}: missing section, expected a mapping")
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: got {value!r}, expected a mapping of settings")
    return value


def _reject_unknown(values: Mapping[str, Any], cls: type, prefix: str) -> None:
    known = {f.name for f in fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"{prefix}{key}: unknown setting, expected one of "
                              f"{', '.join(sorted(known))}")


PORTS = "a port number from 1 to 65535"


def is_port(value: object) -> bool:
    """A TCP port a server can listen on (the metrics endpoint, `sql --serve`)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


def _section(cls: type, values: Mapping[str, Any], name: str) -> Any:
    """Build a section dataclass, checking each value against its default's type."""
    _reject_unknown(values, cls, f"{name}.")
    kwargs = {}
    for f in fields(cls):
        if f.name not in values:
            continue
        value = values[f.name]
        key = f"{name}.{f.name}"
        default = getattr(cls, f.name, None)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
            expected = "true or false"
        elif f.name == "copy_on_write_mb":  # 0: never
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            expected = "a whole number, 0 or more"
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            expected = "a positive whole number"
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            expected = "a positive number"
        elif f.name == "log_retention":  # "7 days" as Delta spells it: "interval 7 days"
            ok, expected, value = True, "", parse_log_retention(value, key)
        elif f.name in ("port", "silver_port"):
            ok, expected = is_port(value), PORTS
        elif f.name == "jars":
            ok = isinstance(value, list) and all(isinstance(j, str) and j for j in value)
            expected = "a list of jar paths"
            value = tuple(value) if ok else value
        elif f.name in ("conf", "storage_options"):
            ok = isinstance(value, Mapping) and all(
                isinstance(k, str) and k and isinstance(v, (str, int, float, bool))
                for k, v in value.items())
            expected = ("a mapping of Spark property names to values" if f.name == "conf"
                        else "a mapping of delta-rs storage option names to values")
            value = {k: _setting_text(v) for k, v in value.items()} if ok else value
        elif f.name in ("tables", "history"):
            ok = value == ALL_TABLES or (isinstance(value, list) and value
                                         and all(isinstance(t, str) for t in value))
            expected = '"*" or a non-empty list of schema.table names'
            if ok and f.name == "history" and value != ALL_TABLES:
                value = _qualified_names(value, key)
        elif f.name == "history_columns":
            ok = isinstance(value, Mapping) and all(
                isinstance(t, str) and isinstance(c, list) and c
                and all(isinstance(n, str) and n for n in c) for t, c in value.items())
            expected = "a mapping of schema.table names to non-empty lists of column names"
            if ok:
                tables = _qualified_names(list(value), key)
                value = {t: tuple(c) for t, c in zip(tables, value.values())}
        else:
            ok = isinstance(value, str) and value != ""
            expected = "a non-empty string"
        if not ok:
            raise ConfigError(f"{key}: got {value!r}, expected {expected}")
        kwargs[f.name] = value
    return cls(**kwargs)


def _setting_text(value: str | int | float | bool) -> str:
    """A setting passed on as text, spelled as Spark and delta-rs spell it (YAML's true
    is "true")."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _check_name(value: str, key: str) -> None:
    if not _IDENTIFIER.match(value):
        raise ConfigError(f"{key}: got {value!r}, expected a lower-case Postgres "
                          "identifier (letters, digits, _)")


def _with_tables(source: SourceConfig) -> SourceConfig:
    if source.tables == ALL_TABLES:
        return source
    return replace(source, tables=_qualified_names(source.tables, "source.tables"))


def _qualified_names(names: Sequence[str], key: str) -> tuple[str, ...]:
    """schema.table names, a bare name taken as public's."""
    qualified = tuple(qualify_table(name) for name in names)
    for name, full in zip(names, qualified):
        if not _QUALIFIED.match(full):
            raise ConfigError(f"{key}: got {name!r}, expected schema.table")
    return qualified
