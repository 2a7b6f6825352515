"""Shared fixtures: a real PostgreSQL server (wal_level=logical) and a Spark session.

Classic PySpark and Sail cannot share a Python process (docs/architecture.md, rule 10),
so the engine is chosen per pytest run with --engine; `make test` runs the tests marked
`spark` once per engine: on Sail, and on classic Spark with delta-spark.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

from pipelines.embedded_pg import EmbeddedPostgres, free_port
from tests.engines import CLASSIC_TEST_CONF, CONFIG_ENGINES

ENGINES = ("sail", "spark")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--engine", choices=ENGINES, default="sail",
                     help="Spark engine for the tests that use the `spark` fixture")


@pytest.fixture(scope="session")
def engine(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--engine")


@pytest.fixture(scope="session")
def config_engine(engine: str) -> str:
    """The config's `engine` for the selected test engine (local is Sail)."""
    return CONFIG_ENGINES[engine]


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
def pg_server() -> Iterator[EmbeddedPostgres]:
    """One PostgreSQL 16 server for the whole run, in a temp dir, on a free port."""
    base = Path(tempfile.mkdtemp(prefix="lakehouse-test-pg-"))
    base.chmod(0o755)  # under root the server runs as an unprivileged user
    server = EmbeddedPostgres(base / "data", free_port()).start()
    yield server
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def source_dsn(pg_server: EmbeddedPostgres) -> Iterator[str]:
    """A fresh database per test; its replication slots are dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_server.dsn(name)
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                     "WHERE database = %s AND active_pid IS NOT NULL", (name,))
        conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = %s", (name,))
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
