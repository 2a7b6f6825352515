"""A partitioned source table lands as ONE silver table, under the partitioned table's name."""

from __future__ import annotations

import psycopg
import pytest

from pipelines.backfill.runner import BackfillOptions, run_backfill
from pipelines.config import parse_config
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from pipelines.lake import Lake, read_delta
from pipelines.silver.job import run_silver
from pipelines.source.setup import run_setup
from pipelines.verify.run import run_verify

pytestmark = [pytest.mark.postgres, pytest.mark.spark, pytest.mark.pg_versions]


def test_partitions_publish_via_their_root_through_backfill_ingest_and_silver(
        source_dsn, tmp_path, spark):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE readings (id int, region text, v numeric(8,2), "
                     "PRIMARY KEY (region, id)) PARTITION BY LIST (region)")
        conn.execute("CREATE TABLE readings_eu PARTITION OF readings FOR VALUES IN ('eu')")
        conn.execute("CREATE TABLE readings_us PARTITION OF readings FOR VALUES IN ('us')")
        conn.execute("INSERT INTO readings SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' "
                     "ELSE 'us' END, g * 0.5 FROM generate_series(1, 40) g")  # before the slot
    config = parse_config({"source": {"dsn": source_dsn, "tables": "*"},
                           "lake": {"path": str(tmp_path / "lake")},
                           "ingest": {"batch_seconds": 0.1}}, tmp_path, {})
    report = run_setup(config.source)
    assert report.tables == ("public.readings",)  # partitions are not tables of their own
    with psycopg.connect(source_dsn) as conn:
        assert conn.execute("SELECT pubviaroot FROM pg_publication WHERE pubname = %s",
                            (config.source.publication,)).fetchone() == (True,)
        conn.execute("UPDATE readings SET region = 'eu' WHERE id = 1")  # moves partition
        conn.execute("UPDATE readings SET v = 99 WHERE id = 2")
        conn.execute("DELETE FROM readings WHERE id = 3")
        conn.execute("INSERT INTO readings VALUES (41, 'us', 1.5)")

    [result] = run_backfill(config, BackfillOptions(chunk_size=15))
    assert result.rows == 40
    run_ingest(config, IngestOptions(until_idle=0.3), StopRequested())
    changes = read_delta(Lake.from_config(config).bronze_changes,
                         columns=["table_name", "op"]).to_pylist()
    assert {c["table_name"] for c in changes if c["op"] != "message"} == {"readings"}
    run_silver(config, spark)
    [diff] = run_verify(config, spark, wait_seconds=5)
    assert (diff.table, diff.equal, diff.source_rows) == ("public.readings", True, 40)
