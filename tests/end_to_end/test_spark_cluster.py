"""Silver, gold and verify on a real Spark standalone cluster: a master and two workers in
their own JVMs on loopback, with `spark.master` pointing at it, and the lake on S3
(MinIO). The executors run in the workers' own directories and share no disk with the
driver, as on a cluster: nothing may depend on state that only the driver has.

The cluster runs beside whichever engine this pytest process uses: every Spark verb is a
`lakehouse` process of its own (engine spark), as a job on a cluster would be.
"""

from __future__ import annotations


import pytest
import yaml

from pipelines.demo.run import DEMO_REPORTS, DEMO_TABLES
from pipelines.lake import Lake, read_delta
from tests.support.cli import lakehouse
from tests.support.demo import change_after_snapshot, seeded
from tests.support.standalone import StandaloneCluster

pytestmark = [pytest.mark.postgres, pytest.mark.classic]


@pytest.fixture
def cluster(tmp_path, s3):  # the store's credentials reach the workers' environment
    cluster = StandaloneCluster(tmp_path / "cluster")
    cluster.base.mkdir()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.mark.long
def test_silver_gold_and_verify_run_on_a_standalone_cluster(source_dsn, tmp_path, cluster, s3):
    seeded(source_dsn)
    lake_url = s3.new_lake()
    config = tmp_path / "lakehouse.yml"
    config.write_text(yaml.safe_dump({
        "source": {"dsn": source_dsn, "tables": DEMO_TABLES},
        "lake": {"path": lake_url, "storage_options": s3.storage_options},
        "engine": "spark", "gold": {"reports": str(DEMO_REPORTS)},
        "spark": {"master": cluster.url, "conf": {  # generated code on: the engine's default
            "spark.sql.shuffle.partitions": "2", "spark.databricks.delta.snapshotPartitions": "2",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1", "spark.executor.memory": "512m",
            "spark.executor.cores": "1", "spark.cores.max": "2"}}}))
    lakehouse(config, "setup")
    lakehouse(config, "backfill")
    change_after_snapshot(source_dsn)
    lakehouse(config, "ingest", "--until-idle", "2")

    lakehouse(config, "silver")
    lakehouse(config, "gold")
    verified = lakehouse(config, "verify")

    for table in DEMO_TABLES:
        assert f"{table}: equal" in verified.stdout
    lake = Lake.of(lake_url, s3.storage_options)
    for report in (p.stem for p in DEMO_REPORTS.glob("*.sql")):
        assert read_delta(lake.gold(report)).num_rows > 0, report
    assert not (tmp_path / "lake").exists()
    # Both workers' executors ran tasks of these jobs, in their own work directories.
    for n in range(cluster.workers):
        logs = "".join(cluster.executor_logs(n))
        assert "Running task" in logs, f"worker {n} ran no task:\n{cluster.log(f'worker-{n}')}"
