"""`lakehouse setup`: check the source can replicate, create publication and slot.

Idempotent: a second run finds everything in place and changes nothing. Every refusal
says what to change on the server, because the fix is always the DBA's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pipelines.config import ALL_TABLES, SourceConfig
from pipelines.errors import SourceError
from pipelines.bronze.landed import landed_lsn
from pipelines.names import pg_identifier, split_table
from pipelines.positions import format_lsn
from pipelines.lake import Lake
from pipelines.source.connection import connect
from pipelines.source.lineage import (
    RECOVER, Source, ensure_lineage, slot_state)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SetupReport:
    """What setup found and did."""

    tables: tuple[str, ...]
    publication_created: bool
    publication_changed: bool
    slot_created: bool
    slot_lsn: str


def run_setup(source: SourceConfig, lake: Lake | None = None) -> SetupReport:
    """Validate the server and tables, then create/align the publication and the slot.

    With the `lake`, first check that the slot still continues what its bronze holds
    (pipelines.source.lineage): a lost slot is never silently replaced, and the source
    server's identity is recorded for later checks."""
    with connect(source.dsn) as conn:
        check_server(conn)
        tables = resolve_tables(conn, source.tables)
        check_keys(conn, tables)
        bronze_end = landed_lsn(lake.bronze_changes, source.slot) if lake else 0
        if lake is not None:
            ensure_lineage(source.dsn, source.slot, lake, bronze_end)
        try:
            created, changed = ensure_publication(conn, source.publication, tables)
            slot_created, slot_lsn = ensure_slot(conn, source)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise SourceError(
                f"setup lacks a privilege: {exc.diag.message_primary}. Creating the "
                "publication needs CREATE on the database and ownership of the tables "
                "(or superuser); run setup once as such a role, or have a DBA create "
                f"publication {source.publication!r} and slot {source.slot!r}.") from exc
    if lake is not None and slot_created:
        ensure_lineage(source.dsn, source.slot, lake, bronze_end)  # records the identity
    return SetupReport(tables, created, changed, slot_created, slot_lsn)


def check_server(conn: psycopg.Connection) -> None:
    """wal_level, slot and sender capacity, and the REPLICATION privilege."""
    wal_level = conn.execute("SHOW wal_level").fetchone()[0]
    if wal_level != "logical":
        raise SourceError(
            f"wal_level is {wal_level!r}, logical replication needs 'logical'. Run "
            "ALTER SYSTEM SET wal_level = logical; then restart Postgres "
            "(on managed services set the parameter group / flag, e.g. "
            "rds.logical_replication = 1 or cloudsql.logical_decoding = on).")
    for setting in ("max_replication_slots", "max_wal_senders"):
        if int(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(setting))).fetchone()[0]) < 1:
            raise SourceError(f"{setting} is 0: set it to at least 1 (10 is typical) and "
                              "restart Postgres")
    allowed = conn.execute(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()[0]
    if not allowed:
        user = conn.execute("SELECT current_user").fetchone()[0]
        raise SourceError(f"role {user!r} lacks the REPLICATION privilege: run "
                          f"ALTER ROLE {user} WITH REPLICATION; as a superuser")


def resolve_tables(conn: psycopg.Connection, tables: tuple[str, ...] | str) -> tuple[str, ...]:
    """Configured tables as schema.table, checked to exist; '*' means all user tables."""
    if tables == ALL_TABLES:
        rows = conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
            "AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1").fetchall()
        found = tuple(r[0] for r in rows)
        if not found:
            raise SourceError('source.tables is "*" but the database has no tables')
        return found
    missing = [t for t in tables if conn.execute(
        "SELECT to_regclass(%s) IS NULL", (pg_identifier(*split_table(t)),)).fetchone()[0]]
    if missing:
        raise SourceError(f"table(s) not found in the source database: {', '.join(missing)}. "
                          "Fix source.tables or create them.")
    return tuple(tables)


def check_keys(conn: psycopg.Connection, tables: tuple[str, ...]) -> None:
    """Every table needs a primary key or a replica identity index to be merged by key."""
    bad, full = [], []
    for table in tables:
        identity, has_key = conn.execute(
            "SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid "
            "AND (i.indisprimary OR i.indisreplident)) FROM pg_class c WHERE c.oid = %s::regclass",
            (pg_identifier(*split_table(table)),)).fetchone()
        if identity == "n" or not has_key:
            bad.append(table)
        elif identity == "f":
            full.append(table)
    if full:
        raise SourceError(
            f"table(s) with REPLICA IDENTITY FULL: {', '.join(full)}. pgoutput then marks "
            "every column as the key, so changes could not be merged by the primary key. "
            "Run ALTER TABLE t REPLICA IDENTITY DEFAULT (or USING INDEX idx).")
    if bad:
        names = ", ".join(bad)
        raise SourceError(
            f"table(s) without a primary key or replica identity index: {names}. Silver "
            "merges rows by key, so add one (ALTER TABLE t ADD PRIMARY KEY (...)) or point "
            "the replica identity at a unique NOT NULL index (ALTER TABLE t REPLICA "
            "IDENTITY USING INDEX idx), or leave the table out of source.tables.")


def ensure_publication(conn: psycopg.Connection, name: str,
                       tables: tuple[str, ...]) -> tuple[bool, bool]:
    """Create the publication, or align its table list with the config. (created, changed)

    publish_via_partition_root: a partitioned table's changes arrive under its own name
    (one silver table, the name backfill reads), not under each partition's.
    """
    table_list = sql.SQL(", ").join(sql.Identifier(*split_table(t)) for t in tables)
    exists = conn.execute("SELECT puballtables, pubviaroot FROM pg_publication "
                          "WHERE pubname = %s", (name,)).fetchone()
    if exists is None:
        options = "publish_via_partition_root = true" + (
            ", publish_generated_columns = stored" if _generated_columns(conn) else "")
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (" + options + ")")
                     .format(sql.Identifier(name), table_list))
        log.info("created publication %s for %d table(s)", name, len(tables))
        return True, False
    all_tables, via_root = exists
    if all_tables:
        raise SourceError(f"publication {name!r} is FOR ALL TABLES; this pipeline manages "
                          "an explicit table list. Drop it or configure another "
                          "source.publication.")
    changed = False
    if _generated_columns(conn) and not publishes_generated_columns(conn, name):
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET (publish_generated_columns = stored)")
                     .format(sql.Identifier(name)))
        log.info("publication %s now publishes stored generated columns", name)
        changed = True
    if not via_root:
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)")
                     .format(sql.Identifier(name)))
        log.info("publication %s now publishes partitions via their root table", name)
        changed = True
    current = {r[0] for r in conn.execute(
        "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s",
        (name,))}
    if current == set(tables):
        return False, changed
    conn.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(
        sql.Identifier(name), table_list))
    log.info("publication %s now covers: %s", name, ", ".join(tables))
    return False, True


def _generated_columns(conn: psycopg.Connection) -> bool:
    """Postgres 18 can publish STORED generated columns: silver then has them too."""
    return conn.info.server_version >= 180000


def publishes_generated_columns(conn: psycopg.Connection, publication: str) -> bool:
    """Whether the publication sends STORED generated columns (Postgres 18+)."""
    return _generated_columns(conn) and bool(conn.execute(
        "SELECT pubgencols = 's' FROM pg_publication WHERE pubname = %s",
        (publication,)).fetchone()[0])


def ensure_slot(conn: psycopg.Connection, source: SourceConfig) -> tuple[bool, str]:
    """Create the pgoutput slot if missing; refuse a slot that cannot be used. (created, lsn)

    Whether a missing slot may be created over a lake is lineage.py's question (asked
    first). On Postgres 17 and later the slot is a failover slot (`failover`): standbys
    with sync_replication_slots keep a copy, so a promotion continues without a resync.
    """
    slot, failover = source.slot, source.failover_slot
    state = slot_state(conn, slot)
    if state is None:
        failover = failover and conn.info.server_version >= 170000
        create = ("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput'"
                  + (", failover => true)" if failover else ")"))
        lsn = conn.execute(create, (slot,)).fetchone()[0]
        log.info("created replication slot %s at %s%s", slot, lsn,
                 " (failover slot)" if failover else "")
        return True, lsn
    current_db = conn.execute("SELECT current_database()").fetchone()[0]
    if state.plugin != "pgoutput" or state.database != current_db:
        raise SourceError(f"replication slot {slot!r} exists but uses plugin {state.plugin!r} "
                          f"in database {state.database!r}; expected pgoutput in "
                          f"{current_db!r}. Configure another source.slot.")
    if state.invalidated:
        raise SourceError(f"replication slot {slot!r} is invalidated ({state.invalidated}). "
                          f"{RECOVER}")
    if failover and state.failover is False:
        Source(source.dsn).command(
            f"ALTER_REPLICATION_SLOT {pg_identifier(slot)} ( FAILOVER true )")
        log.info("replication slot %s is now a failover slot", slot)
    return False, format_lsn(state.confirmed_flush_lsn)
