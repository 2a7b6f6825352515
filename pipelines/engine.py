"""One function returns the SparkSession for the configured engine.

- local: an embedded Sail Spark Connect server in this process (no JVM), stopped at exit;
- spark: classic PySpark with delta-spark;
- connect: an existing Spark Connect endpoint (Spark with Delta Lake, a Sail server);
- databricks: the job cluster's own session.
Pipeline code never branches on the engine beyond this module (docs/architecture.md, Engines).
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from pipelines import storage
from pipelines.class_archive import JAVA_OPTIONS, with_class_archive
from pipelines.config import PORTS, is_port
from pipelines.errors import ConfigError
from pipelines.extras import check_engine

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pipelines.config import Config
    from pipelines.lake import Lake

log = logging.getLogger(__name__)

SHUFFLE_PARTITIONS = "4"
HUGE_METHOD_BYTES = 8000  # HotSpot's HugeMethodLimit: a longer method is never compiled


def get_spark(config: "Config", endpoint: "Endpoint | None" = None) -> "SparkSession":
    """The session for `config.engine`, set up to reach the lake wherever it lives
    (pipelines.storage), and serving Spark Connect at `endpoint` if given (local and
    spark only: serve_session). Its warehouse dir is <lake>/_warehouse on a local lake,
    else one in the temp directory: the session catalog holds only external tables, and
    a relative default would put a directory wherever the job happens to run."""
    from pipelines.lake import Lake

    check_engine(config.engine)
    lake = Lake.from_config(config)
    warehouse = _warehouse(lake)
    options = dict(lake.options)
    if config.engine == "local":
        os.environ.update(storage.sail_environment(lake.store, options))
        return start_local_session(warehouse, endpoint)
    if config.engine == "spark":
        conf = {**storage.hadoop_conf(lake.store, options, os.environ), **config.spark.conf}
        if endpoint is not None:
            plugins = [p for p in conf.get("spark.plugins", "").split(",") if p]
            conf.update({"spark.plugins": ",".join(plugins + [CONNECT_PLUGIN]),
                         "spark.connect.grpc.binding.address": "127.0.0.1",
                         "spark.connect.grpc.binding.port": str(endpoint.port)})
        return start_classic_session(warehouse, config.spark.master, config.spark.jars, conf,
                                     packages=storage.spark_packages(lake.store))
    if config.engine == "connect":
        return connect_session(config.connect.url, config.connect.conf)
    if config.engine == "databricks":
        return databricks_session()
    raise ConfigError(f"engine: got {config.engine!r}, expected local, spark, connect or "
                      "databricks")


def _warehouse(lake: "Lake") -> str:
    return (lake.uri("_warehouse") if lake.is_local
            else os.path.join(tempfile.gettempdir(), "lakehouse-warehouse"))


# Sail removes a session idle for 15 minutes; the embedded server serves this process
# alone, so a notebook left open over lunch or a test run's long pause must not lose it.
SAIL_IDLE_TIMEOUT = "SAIL_SPARK__SESSION_TIMEOUT_SECS"
LOCAL_IDLE_SECONDS = 365 * 24 * 3600


def start_local_session(warehouse: str | Path,
                        endpoint: "Endpoint | None" = None) -> "SparkSession":
    """Start Sail in-process on a loopback port (ephemeral, else the endpoint's) and
    connect to it (in the endpoint's session). Sail reads an object store's settings and
    credentials from this process's environment."""
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    os.environ.setdefault(SAIL_IDLE_TIMEOUT, str(LOCAL_IDLE_SECONDS))
    server = SparkConnectServer("127.0.0.1", endpoint.port if endpoint else 0)
    server.start(background=True)
    host, port = server.listening_address
    url = endpoint.url if endpoint else f"sc://{host}:{port}"
    spark = (SparkSession.builder.remote(url)
             .config("spark.sql.warehouse.dir", str(warehouse))
             .config("spark.sql.shuffle.partitions", SHUFFLE_PARTITIONS)
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())

    def shutdown() -> None:
        spark.stop()
        server.stop()

    atexit.register(shutdown)
    log.info("local engine: Sail Spark Connect server on %s:%s", host, port)
    return spark


# What every classic session gets: Delta's SQL extension and catalog, UTC, no UI, and
# settings for small incremental batches (docs/silver.md, "Classic Spark"). Settings in
# the config's spark.conf come after these and win.
CLASSIC_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",  # progress bars would garble the CLI's output
    # Delta rebuilds a table's state from its log in 50 tasks by default, on every new
    # version a run reads: the pipeline keeps its logs short (pipelines.lake.LOG_RETENTION),
    # so a few tasks do it in a fraction of the time.
    "spark.databricks.delta.snapshotPartitions": SHUFFLE_PARTITIONS,
    # MERGE copies a source it cannot prove stable before it reads it twice: every MERGE
    # source here is staged Parquet or an empty relation, which no one changes meanwhile.
    "spark.databricks.delta.merge.materializeSource": "none",
    # HotSpot never compiles a method of more than 8,000 bytes of bytecode: whole-stage
    # code generation over a table's typing (a CASE, a pattern and a cast per column)
    # makes such methods, which then run in the interpreter, several times slower than
    # the per-operator code Spark falls back to under this limit (Spark's own advice
    # for HotSpot; its default only catches methods the JVM refuses to load).
    "spark.sql.codegen.hugeMethodLimit": str(HUGE_METHOD_BYTES),
}
SHUFFLE = "spark.sql.shuffle.partitions"
# A local master's driver runs the jobs' tasks too, on this machine's cores, and each
# query compiles new generated classes: C2's compile threads then take those cores from
# the jobs, where the C1 compiler alone gets the code compiled with far less work
# (docs/silver.md, "Classic Spark"). The code cache stays a server JVM's 240 MB: C1
# alone would get a client's 48 MB, which several tables at once can fill.
LOCAL_DRIVER_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"  # Connect in a driver
CONNECT_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


def start_classic_session(warehouse: str | Path, master: str = "local[2]",
                          jars: tuple[str, ...] = (),
                          conf: Mapping[str, str] | None = None,
                          packages: list[str] | None = None) -> "SparkSession":
    """Classic PySpark with Delta Lake.

    Without `jars`, configure_spark_with_delta_pip asks Spark to fetch the delta-spark
    release that matches the installed delta-spark package from Maven Central, with
    `packages` (a store's Hadoop connector); Ivy keeps them in its cache: only the first
    start downloads. With `jars`, nothing is fetched: they must include the connector.
    The JVM's own output (Ivy's report, log4j's lines) goes to the logger `spark`
    (pipelines.jvm_output). Fails with a ConfigError saying what to do when Delta's
    classes cannot be loaded.
    """
    from pyspark.sql import SparkSession

    from pipelines.jvm_output import start_spark_context

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python UDF workers: this venv
    # PySpark builds a Spark Connect session whenever these are set, and a process that
    # started one (Sail, a notebook) leaves SPARK_CONNECT_MODE_ENABLED to its children;
    # engine spark asks for the classic session.
    for variable in CONNECT_VARIABLES:
        os.environ.pop(variable, None)
    builder = SparkSession.builder.master(master).appName("lakehouse") \
        .config("spark.sql.warehouse.dir", str(warehouse))
    own = with_class_archive(with_local_jit(master, conf or {}))
    for key, value in {**CLASSIC_CONF, **own}.items():
        builder = builder.config(key, value)
    try:
        if jars:
            builder = builder.config("spark.jars", ",".join(jars))
        else:
            from delta import configure_spark_with_delta_pip

            builder = configure_spark_with_delta_pip(builder, extra_packages=packages or None)
        start_spark_context(builder._options)  # noqa: SLF001  what spark-submit is given
        spark = builder.getOrCreate()
        # Spark's own class loader: jars fetched by spark.jars.packages are invisible to
        # py4j's Class.forName.
        spark._jvm.org.apache.spark.util.Utils.classForName(  # noqa: SLF001
            "io.delta.tables.DeltaTable", True, False)
    except Exception as exc:  # the JVM reports missing jars in many shapes
        raise ConfigError(
            "the spark engine could not load Delta Lake's classes. Either let "
            "configure_spark_with_delta_pip fetch io.delta:delta-spark from Maven Central "
            "(needs network access to it once; Ivy caches the jars), or list local jars in "
            "spark.jars in the config (delta-spark and delta-storage of the release that "
            f"matches the delta-spark package). Cause: {str(exc).splitlines()[0][:300]}"
        ) from exc
    if SHUFFLE not in (conf or {}):
        # A batch's shuffles get a task per core of the cluster, at least SHUFFLE_PARTITIONS;
        # adaptive execution (on) coalesces those of a small batch.
        spark.conf.set(SHUFFLE, str(max(int(SHUFFLE_PARTITIONS),
                                        spark.sparkContext.defaultParallelism)))
    log.info("spark engine: classic Spark %s (master %s) with Delta Lake", spark.version, master)
    return spark


def with_local_jit(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` with LOCAL_DRIVER_JIT among the driver JVM's options when `master` is local
    and those options choose no compiler of their own."""
    options = conf.get(JAVA_OPTIONS, "")
    if not master.startswith("local") or "Tiered" in options:
        return dict(conf)
    return {**conf, JAVA_OPTIONS: f"{options} {LOCAL_DRIVER_JIT}".strip()}


@dataclass(frozen=True)
class Endpoint:
    """A Spark Connect endpoint this process serves on localhost (`lakehouse sql --serve`).

    Sail's catalog belongs to a session, so clients attach to the one session this
    process registers the tables in, named in the URL; classic Spark's catalog is shared
    by every session of its driver, which serves Connect through Spark's own plugin.
    """

    port: int
    session_id: str | None = None  # Sail: the session clients share

    @property
    def url(self) -> str:
        session = f"/;session_id={self.session_id}" if self.session_id else ""
        return f"sc://127.0.0.1:{self.port}{session}"


def serve_session(config: "Config", port: int) -> tuple["SparkSession", Endpoint]:
    """A session behind a Spark Connect endpoint on localhost:`port`, and the endpoint."""
    if config.engine not in ("local", "spark"):
        raise ConfigError(f"`lakehouse sql --serve` opens an endpoint for engines local and "
                          f"spark; engine {config.engine} has its own: attach to that")
    check_port_free(port)
    endpoint = Endpoint(port, str(uuid.uuid4()) if config.engine == "local" else None)
    return get_spark(config, endpoint), endpoint


def query_errors() -> tuple[type[Exception], ...]:
    """What a rejected or failed query raises: PySpark's errors, and on classic Spark the
    JVM's when PySpark cannot classify them (a failed stage, a missing file)."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    return PySparkException, Py4JJavaError


def engine_message(exc: Exception) -> str:
    """The engine's own explanation, without the plan or JVM stack trace after it."""
    lines = []
    for line in str(exc).strip().splitlines():
        if not line.strip() or line.startswith(("JVM stacktrace", "'", "+-", ":", "\tat ")):
            break
        lines.append(line)
    return "\n".join(lines[:10]) or type(exc).__name__


def check_port_free(port: int) -> None:
    """A clear error before the engine starts, rather than each engine's own."""
    if not is_port(port):
        raise ConfigError(f"--port: got {port}, expected {PORTS}")
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ConfigError(f"--port {port}: cannot listen there ({exc.strerror}); "
                              "choose another with --port") from exc


def connect_session(url: str = "", conf: Mapping[str, str] | None = None) -> "SparkSession":
    """A session on an existing Spark Connect server: `url`, else $SPARK_REMOTE. The
    server owns its warehouse and its way to the lake's storage; this sends only session
    settings. A token comes from the environment (SPARK_CONNECT_AUTHENTICATE_TOKEN, read
    by PySpark itself), never from the config."""
    from pyspark.sql import SparkSession

    url = url or os.environ.get("SPARK_REMOTE", "")
    if not url:
        raise ConfigError("engine connect needs an endpoint: set connect.url "
                          "(sc://host:port) in the config, or SPARK_REMOTE in the environment")
    builder = SparkSession.builder.remote(url).config("spark.sql.session.timeZone", "UTC")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
        version = spark.version
    except Exception as exc:  # gRPC reports an unreachable or refusing server many ways
        raise ConfigError(f"engine connect: cannot open a session on {_endpoint(url)}: "
                          f"{str(exc).splitlines()[0][:300]}") from exc
    log.info("connect engine: Spark Connect server %s (Spark %s)", _endpoint(url), version)
    return spark


def _endpoint(url: str) -> str:
    """A Connect URL without its parameters, which may hold a token."""
    return url.split("/;", 1)[0].split(";", 1)[0]


def databricks_session() -> "SparkSession":
    """The session Databricks already created for this job or notebook."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    if spark is None:
        spark = SparkSession.builder.getOrCreate()
    return spark
