import psycopg
import pytest

from pipelines.config import SourceConfig
from pipelines.embedded_pg import EmbeddedPostgres, free_port
from pipelines.errors import SourceError
from pipelines.source.setup import run_setup
from tests.support.cli import lakehouse
from tests.support.slots import invalidate_slot


@pytest.fixture
def app_dsn(source_dsn):
    with psycopg.connect(source_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE users (id bigint PRIMARY KEY, name text)")
        conn.execute("CREATE TABLE members (project int, member int, role text, "
                     "PRIMARY KEY (project, member))")
        conn.execute("CREATE TABLE logs (line text)")
    return source_dsn


def publication_tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables "
            "WHERE pubname = 'lakehouse'")}


def test_setup_creates_publication_and_slot_then_changes_nothing(app_dsn):
    source = SourceConfig(app_dsn, tables=("public.users", "public.members"))
    first = run_setup(source)
    assert first.publication_created and first.slot_created
    assert publication_tables(app_dsn) == {"public.users", "public.members"}
    with psycopg.connect(app_dsn) as conn:
        slot = conn.execute("SELECT plugin, slot_type FROM pg_replication_slots "
                            "WHERE slot_name = 'lakehouse'").fetchone()
    assert slot == ("pgoutput", "logical")

    second = run_setup(source)
    assert not (second.publication_created or second.publication_changed or second.slot_created)
    assert second.slot_lsn == first.slot_lsn


def test_setup_aligns_publication_with_config(app_dsn):
    run_setup(SourceConfig(app_dsn, tables=("public.users",)))
    report = run_setup(SourceConfig(app_dsn, tables=("public.users", "public.members")))
    assert report.publication_changed
    assert publication_tables(app_dsn) == {"public.users", "public.members"}


def test_table_without_primary_key_is_refused_naming_table_and_fix(app_dsn):
    with pytest.raises(SourceError) as info:
        run_setup(SourceConfig(app_dsn, tables=("public.users", "public.logs")))
    assert info.value.exit_code == 3
    assert "public.logs" in str(info.value) and "ADD PRIMARY KEY" in str(info.value)
    assert publication_tables(app_dsn) == set()  # nothing half-created


def test_replica_identity_full_is_refused_with_the_fix(app_dsn):
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE users REPLICA IDENTITY FULL")
    with pytest.raises(SourceError, match="REPLICA IDENTITY FULL: public.users") as info:
        run_setup(SourceConfig(app_dsn, tables=("public.users",)))
    assert "REPLICA IDENTITY DEFAULT" in str(info.value)


def test_missing_privileges_are_a_source_error_not_a_traceback(app_dsn):
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("CREATE ROLE cdc_weak LOGIN REPLICATION")
        conn.execute("GRANT SELECT ON users TO cdc_weak")
    weak = app_dsn.replace("user=postgres", "user=cdc_weak")
    try:
        with pytest.raises(SourceError, match="setup lacks a privilege") as info:
            run_setup(SourceConfig(weak, tables=("public.users",)))
        assert info.value.exit_code == 3
    finally:
        with psycopg.connect(app_dsn, autocommit=True) as conn:
            conn.execute("DROP OWNED BY cdc_weak")
            conn.execute("DROP ROLE cdc_weak")


def test_all_tables_refuses_keyless_tables_too(app_dsn):
    with pytest.raises(SourceError, match="public.logs"):
        run_setup(SourceConfig(app_dsn, tables="*"))


def test_missing_table_is_named(app_dsn):
    with pytest.raises(SourceError, match="public.nope"):
        run_setup(SourceConfig(app_dsn, tables=("public.nope",)))


def test_wal_level_replica_is_refused_with_exit_3(tmp_path_factory):
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="lakehouse-test-replica-"))
    base.chmod(0o755)
    server = EmbeddedPostgres(base / "data", free_port()).start({"wal_level": "replica"})
    try:
        with pytest.raises(SourceError) as info:
            run_setup(SourceConfig(server.dsn(), tables="*"))
        assert info.value.exit_code == 3
        assert "wal_level is 'replica'" in str(info.value)
        assert "ALTER SYSTEM SET wal_level = logical" in str(info.value)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_setup_cli_exit_codes(app_dsn, tmp_path):
    config = tmp_path / "c.yml"
    config.write_text(f"source: {{dsn: '{app_dsn}', tables: [public.logs]}}\n")
    result = lakehouse(config, "setup", check=False)
    assert result.returncode == 3
    assert "public.logs" in result.stderr and "Traceback" not in result.stderr

    config.write_text(f"source: {{dsn: '{app_dsn}', tables: [public.users]}}\n")
    result = lakehouse(config, "setup", check=False)
    assert result.returncode == 0, result.stderr
    assert "slot:        lakehouse (created" in result.stdout


def test_status_exits_3_and_points_to_recovery_when_the_slot_is_lost(app_dsn, tmp_path):
    """A slot invalidated by max_slot_wal_keep_size: status must not look healthy."""
    run_setup(SourceConfig(app_dsn, tables=("public.users",)))
    invalidate_slot(app_dsn)
    config = tmp_path / "c.yml"
    config.write_text(f"source: {{dsn: '{app_dsn}', tables: [public.users]}}\n"
                      f"lake: {{path: '{tmp_path / 'lake'}'}}\n")
    result = lakehouse(config, "status", check=False)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "is invalidated" in result.stdout and "lakehouse recover" in result.stdout
    with pytest.raises(SourceError, match="is invalidated"):
        run_setup(SourceConfig(app_dsn, tables=("public.users",)))


def test_an_existing_publication_is_switched_to_publish_via_partition_root(app_dsn):
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION lakehouse FOR TABLE users, members")
    report = run_setup(SourceConfig(app_dsn, tables=("public.users", "public.members")))
    assert report.publication_changed and not report.publication_created
    with psycopg.connect(app_dsn) as conn:
        assert conn.execute("SELECT pubviaroot FROM pg_publication "
                            "WHERE pubname = 'lakehouse'").fetchone() == (True,)
    assert not run_setup(SourceConfig(app_dsn, tables=("public.users", "public.members"))
                         ).publication_changed
