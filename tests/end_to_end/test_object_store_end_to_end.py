"""The pipeline with its lake on object storage, every verb a `lakehouse` process as in a
deployment: setup, a backfill under load, an ingest SIGKILLed mid-stream, silver, gold
and verify. S3 (MinIO) on every engine; Azure Blob (Azurite) on Sail and delta-rs.
Credentials only in the environment: none of them may show up in any output."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psycopg
import pytest
import yaml

from pipelines.demo.run import DEMO_REPORTS, DEMO_TABLES
from pipelines.demo.seed import create_schema, seed
from pipelines.demo.workload import run_workload
from pipelines.lake import Lake, read_delta
from pipelines.storage import SECRET_VARIABLES
from tests.support import cli
from tests.support.config import write_config
from tests.support.engines import CLASSIC_TEST_CONF
from tests.support.ingest import reference_positions
from tests.support.object_stores import StoreServer

pytestmark = pytest.mark.postgres


class Lakehouse:
    """`lakehouse` commands on one config; remembers everything they printed."""

    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path
        self.output: list[str] = []

    def __call__(self, *args: str) -> subprocess.CompletedProcess:
        result = cli.lakehouse(self.config_path, *args, check=False)
        self.output += [result.stdout, result.stderr]
        assert result.returncode == 0, f"lakehouse {' '.join(args)}:\n{result.stderr[-4000:]}"
        return result

    def start(self, *args: str, log) -> subprocess.Popen:
        return cli.start_lakehouse(self.config_path, *args, stdout=log,
                                   stderr=subprocess.STDOUT)


def store_lakehouse(tmp_path: Path, dsn: str, store: StoreServer, engine: str) -> Lakehouse:
    """The demo's tables with a fresh lake on `store`, on `engine`."""
    return Lakehouse(write_config(
        tmp_path / "lakehouse.yml", dsn, store.new_lake(), DEMO_TABLES,
        storage_options=store.storage_options, engine=engine,
        spark={"master": "local[2]", "conf": CLASSIC_TEST_CONF}, ingest={"batch_seconds": 0.2},
        backfill={"chunk_size": 200}, gold={"reports": str(DEMO_REPORTS)}))


def bronze_positions(lake: Lake) -> list[tuple]:
    rows = read_delta(lake.bronze_changes).sort_by(
        [("commit_lsn", "ascending"), ("change_index", "ascending")]).to_pylist()
    return [(r["commit_lsn"], r["change_index"], r["op"], _content(r)) for r in rows]


def _content(row: dict) -> tuple:
    """What tests.support.ingest.reference_positions records of a change."""
    if row["op"] == "message":
        return (row["message_prefix"],)
    if row["op"] == "delete":
        return (row["old_values"][0],)
    return () if row["op"] == "truncate" else tuple(row["values"])


def run_pipeline_on_a_store(tmp_path, dsn: str, store: StoreServer, engine: str,
                            kills: int) -> Lakehouse:
    """Setup; ingest and a backfill while a workload runs, the ingest SIGKILLed `kills`
    times; catch up; bronze must hold every change of the slot exactly once."""
    with psycopg.connect(dsn) as conn:
        create_schema(conn)
        seed(conn, 400)
    lakehouse = store_lakehouse(tmp_path, dsn, store, engine)
    lakehouse("setup")
    with psycopg.connect(dsn, autocommit=True) as conn:  # the independent reader
        conn.execute("SELECT pg_create_logical_replication_slot('reference', 'pgoutput')")
    load = threading.Thread(target=run_workload, args=(dsn, 400, 2, 6 + 2 * kills))
    load.start()
    log = (tmp_path / "ingest.log").open("w")
    try:
        ingest = lakehouse.start("ingest", log=log)
        lakehouse("backfill")  # under load, beside the ingest
        for _ in range(kills):
            time.sleep(1.5)
            assert ingest.poll() is None, (tmp_path / "ingest.log").read_text()[-3000:]
            os.kill(ingest.pid, signal.SIGKILL)
            ingest.wait()
            ingest = lakehouse.start("ingest", log=log)
    finally:
        load.join()
        ingest.send_signal(signal.SIGINT)
        ingest.wait(60)
    lakehouse("ingest", "--until-idle", "2")
    lake = Lake.of(yaml.safe_load(lakehouse.config_path.read_text())["lake"]["path"],
                   store.storage_options)
    assert bronze_positions(lake) == reference_positions(dsn)
    lakehouse.output.append((tmp_path / "ingest.log").read_text())
    return lakehouse


def assert_no_secret_in(outputs: list[str]) -> None:
    secrets = [os.environ[name] for name in SECRET_VARIABLES if os.environ.get(name)]
    assert secrets, "the test meant to run with credentials in the environment"
    for text in outputs:
        for secret in secrets:
            assert secret not in text


@pytest.mark.long
@pytest.mark.spark  # on Sail and on classic Spark with Delta Lake
def test_the_pipeline_on_s3_survives_kills_and_verifies(source_dsn, tmp_path, s3, config_engine):
    lakehouse = run_pipeline_on_a_store(tmp_path, source_dsn, s3, config_engine, kills=2)
    lakehouse("silver")
    lakehouse("gold")
    verified = lakehouse("verify")
    for table in DEMO_TABLES:
        assert f"{table}: equal" in verified.stdout
    status = lakehouse("status")
    for report in (p.stem for p in DEMO_REPORTS.glob("*.sql")):
        assert f"gold {report}: refreshed" in status.stdout
    lakehouse("-v", "status", "--json")
    assert_no_secret_in(lakehouse.output)


def test_the_pipeline_on_azure_blob_lands_and_verifies(source_dsn, tmp_path, azurite,
                                                       monkeypatch):
    for name, value in azurite.env.items():
        monkeypatch.setenv(name, value)
    lakehouse = run_pipeline_on_a_store(tmp_path, source_dsn, azurite, "local", kills=1)
    lakehouse("silver")
    lakehouse("gold")
    verified = lakehouse("verify")
    for table in DEMO_TABLES:
        assert f"{table}: equal" in verified.stdout
    assert_no_secret_in(lakehouse.output)
