"""A lost slot is never silently replaced: once bronze holds changes from a slot, `setup`
refuses to create a new one (the changes in between would never reach the lake) and
`status` reports the loss, both with exit 3 and the way out (`lakehouse recover`,
tests/end_to_end/test_recover.py; or a fresh lake)."""

from __future__ import annotations

import psycopg
import pytest

from pipelines.errors import SourceError
from pipelines.bronze.landed import landed_lsn
from pipelines.lake import Lake
from pipelines.source.setup import run_setup
from tests.support.cli import lakehouse
from tests.support.config import write_config
from tests.support.ingest import execute, ingest

pytestmark = [pytest.mark.postgres, pytest.mark.pg_versions]


def slot_exists(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_replication_slots "
                            "WHERE slot_name = 'lakehouse'").fetchone()[0] == 1


def test_setup_and_status_refuse_a_new_slot_over_a_lake_with_changes(source, tmp_path):
    dsn = source.source.dsn
    execute(dsn, "INSERT INTO items (id, name) VALUES (1, 'a'), (2, 'b')")
    ingest(source)
    landed = landed_lsn(Lake.from_config(source).bronze_changes, source.source.slot)
    assert landed > 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot('lakehouse')")
    execute(dsn, "DELETE FROM items WHERE id = 1")  # a change no slot will ever deliver

    with pytest.raises(SourceError, match="is missing, but bronze holds changes"):
        run_setup(source.source, Lake.from_config(source))
    assert not slot_exists(dsn)

    config = write_config(tmp_path / "lakehouse.yml", dsn, source.lake.path, source.source.tables)
    for verb, shown in (("setup", "lakehouse recover"), ("status", "BROKEN")):
        done = lakehouse(config, verb, check=False)
        assert done.returncode == 3, done.stdout + done.stderr
        assert shown in done.stdout + done.stderr
    assert not slot_exists(dsn)

    fresh = tmp_path / "fresh.yml"  # the documented way out: a fresh lake
    fresh.write_text(config.read_text().replace(source.lake.path, str(tmp_path / "new-lake")))
    done = lakehouse(fresh, "setup", check=False)
    assert done.returncode == 0, done.stderr
    assert slot_exists(dsn)
