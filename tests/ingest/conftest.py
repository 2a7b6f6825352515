"""Fixtures for ingest tests: a published source database and a lake under tmp_path."""

from __future__ import annotations

import psycopg
import pytest

from pipelines.config import Config
from pipelines.source.setup import run_setup
from tests.support.config import make_config
from tests.support.ingest import FAST_INGEST, TABLES, TABLES_SQL


@pytest.fixture
def source(source_dsn, tmp_path) -> Config:
    """A database with the test tables, publication and slot, and a config for it."""
    return _source(make_config(source_dsn, tmp_path / "lake", TABLES, ingest=FAST_INGEST))


@pytest.fixture
def s3_source(source_dsn, s3) -> Config:
    """`source` with its lake on S3 (MinIO)."""
    return _source(make_config(source_dsn, s3.new_lake(), TABLES,
                               storage_options=s3.storage_options, ingest=FAST_INGEST))


def _source(config: Config) -> Config:
    with psycopg.connect(config.source.dsn, autocommit=True) as conn:
        conn.execute(TABLES_SQL)
    run_setup(config.source)
    return config
