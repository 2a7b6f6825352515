"""`verify` with engine databricks, run on Sail and classic Spark: it compares the source
with the silver catalog tables `<catalog>`.`<silver_schema>`.`<table>` (here the
session's own catalog), a mixed-case source name included. tests/test_verify.py runs its
BOTH_LAYOUTS tests with catalog tables too (tests/support/layouts.py)."""

from __future__ import annotations

import psycopg
import pytest

from pipelines.catalog import TableNames
from pipelines.ingest.run import IngestOptions, StopRequested, run_ingest
from pipelines.silver.job import run_silver
from pipelines.source.setup import run_setup
from pipelines.verify.run import run_verify
from tests.support.config import make_config

pytestmark = [pytest.mark.postgres, pytest.mark.spark]


def test_verify_compares_the_source_with_the_catalog_tables(source_dsn, tmp_path, spark,
                                                           unity_catalog):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute('CREATE TABLE "Things" (id int PRIMARY KEY, name text)')
    config = make_config(source_dsn, tmp_path / "lake", ["public.Things"], base_dir=tmp_path,
                         ingest={"batch_seconds": 0.1}, **unity_catalog)
    silver_schema = config.databricks.silver_schema
    run_setup(config.source)
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("""INSERT INTO "Things" SELECT g, 'n' || g FROM generate_series(1, 5) g""")
    run_ingest(config, IngestOptions(until_idle=0.3), StopRequested())
    run_silver(config, spark)
    things = TableNames.from_config(config).silver("public", "Things").sql
    assert things == f"`{spark.catalog.currentCatalog()}`.`{silver_schema}`.`things`"

    [diff] = run_verify(config, spark, wait_seconds=5)
    assert (diff.table, diff.equal, diff.source_rows, diff.silver_rows) == (
        "public.Things", True, 5, 5)

    spark.sql(f"MERGE INTO {things} t USING (SELECT 2 AS id) s ON t.id = s.id "
             "WHEN MATCHED THEN DELETE").collect()
    [diff] = run_verify(config, spark, wait_seconds=5)
    assert diff.counts == {"missing": 1} and diff.examples == {"missing": ["2"]}
