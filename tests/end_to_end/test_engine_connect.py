"""`engine: connect`: silver, gold, verify and sql on an existing Spark Connect server
(named by connect.url, or by SPARK_REMOTE), each verb a `lakehouse` process of its own as a job
would run it. On the Spark pass the
server is Spark's own with Delta Lake, and only a client presenting its token gets in
(the token reaches the pipeline through the environment alone); on the Sail pass it is
a standalone Sail server."""

from __future__ import annotations

import os
import secrets

import pytest

from pipelines.demo.run import DEMO_REPORTS, DEMO_TABLES
from pipelines.lake import Lake, read_delta
from tests.support.cli import lakehouse
from tests.support.config import write_config
from tests.support.connect_servers import start_sail, start_spark_connect
from tests.support.demo import change_after_snapshot, seeded

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"


@pytest.fixture
def token() -> str:
    return secrets.token_hex(16)


@pytest.fixture
def server(engine, tmp_path, token):
    workdir = tmp_path / "server"
    workdir.mkdir()
    server = start_spark_connect(workdir, token) if engine == "spark" else start_sail(workdir)
    yield server
    server.stop()


@pytest.mark.long
def test_silver_gold_and_verify_run_on_a_spark_connect_server(source_dsn, tmp_path, server,
                                                              engine, token):
    seeded(source_dsn)
    lake = tmp_path / "lake"
    settings = {"engine": "connect", "gold": {"reports": str(DEMO_REPORTS)}}
    config = write_config(tmp_path / "lakehouse.yml", source_dsn, lake, DEMO_TABLES,
                          connect={"url": server.url}, **settings)
    # PySpark's own variable stands in for connect.url
    remote = write_config(tmp_path / "remote.yml", source_dsn, lake, DEMO_TABLES, **settings)
    lakehouse(config, "setup")
    lakehouse(config, "backfill")
    change_after_snapshot(source_dsn)
    lakehouse(config, "ingest", "--until-idle", "2")

    authenticated = {**os.environ, **({TOKEN_ENV: token} if engine == "spark" else {})}
    silver = lakehouse(config, "silver", env=authenticated)
    lakehouse(config, "gold", env=authenticated)
    verified = lakehouse(remote, "verify", env={**authenticated, "SPARK_REMOTE": server.url})
    counted = lakehouse(config, "sql", "--format", "csv",
                        "SELECT count(*) AS n FROM lakehouse_gold.hours_per_project_per_day",
                        env=authenticated)

    assert f"Spark Connect server {server.url}" in silver.stderr
    assert f"Spark Connect server {server.url}" in verified.stderr
    for table in DEMO_TABLES:
        assert f"{table}: equal" in verified.stdout
    for report in (p.stem for p in DEMO_REPORTS.glob("*.sql")):
        assert read_delta(Lake.of(str(lake)).gold(report)).num_rows > 0, report
    hours = read_delta(Lake.of(str(lake)).gold("hours_per_project_per_day")).num_rows
    assert counted.stdout == f"n\n{hours}\n"  # the tables are registered on the server


def test_a_spark_connect_server_refuses_a_client_without_its_token(engine, tmp_path,
                                                                    server, source_dsn):
    if engine != "spark":
        pytest.skip("a standalone Sail server has no authentication")
    config = write_config(tmp_path / "lakehouse.yml", source_dsn, tmp_path / "lake",
                          engine="connect", connect={"url": server.url})

    refused = lakehouse(config, "silver", env={**os.environ, TOKEN_ENV: "wrong"}, check=False)

    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"engine connect: cannot open a session on {server.url}" in refused.stderr
    assert "wrong" not in refused.stderr
