"""Ingest tests' source and reads: the test tables, statements in one transaction, an
ingest until idle, bronze in position order, and the independent reader's changes."""

from __future__ import annotations

import psycopg

from pipelines.config import Config
from pipelines.ingest.pgoutput import (Begin, Commit, Delete, Insert, LogicalMessage,
                                       Truncate, Update, decode_message)
from pipelines.ingest.run import IngestOptions, IngestReport, StopRequested, run_ingest
from pipelines.lake import Lake, read_delta
from pipelines.source.text_format import with_text_format

TABLES_SQL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE items (
    id bigint PRIMARY KEY, i2 smallint, i4 integer, amount numeric(12,3), ratio float8,
    f4 real, flag boolean, name text, code varchar(8), ident uuid, day date,
    at timestamp, at_tz timestamptz, doc jsonb, raw bytea, tags text[], nums int[],
    feeling mood, body text);
ALTER TABLE items ALTER COLUMN body SET STORAGE EXTERNAL;
CREATE TABLE members (project int, member int, role text, PRIMARY KEY (project, member));
CREATE TABLE unpublished (id int PRIMARY KEY, v text);
"""
TABLES = ["public.items", "public.members"]
FAST_INGEST = {"batch_seconds": 0.1, "status_interval_seconds": 1}


def execute(dsn: str, *statements: str) -> None:
    """Run statements in one transaction."""
    with psycopg.connect(dsn) as conn:
        for statement in statements:
            conn.execute(statement)


def ingest(config: Config, until_idle: float = 0.5) -> IngestReport:
    return run_ingest(config, IngestOptions(until_idle=until_idle), StopRequested())


def bronze(config: Config) -> list[dict]:
    table = read_delta(Lake.from_config(config).bronze_changes)
    return table.sort_by([("commit_lsn", "ascending"), ("change_index", "ascending")]).to_pylist()


def reference_positions(dsn: str, slot: str = "reference") -> list[tuple[int, int, str, tuple]]:
    """Every change of the publication, with positions, read through another slot: row
    changes with their values (a delete with its key), logical messages with their
    prefix (backfill watermarks), truncates (one per table). Values in the text formats
    the ingest's session sets (ISO intervals, ...)."""
    with psycopg.connect(with_text_format(dsn)) as conn:
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'lakehouse', 'messages', 'true')",
            (slot,)).fetchall()
    result, commit_lsn, index = [], None, 0
    for (data,) in rows:
        message = decode_message(data)
        if isinstance(message, Begin):
            commit_lsn, index = message.final_lsn, 0
        elif isinstance(message, (Insert, Update)):
            result.append((commit_lsn, index, type(message).__name__.lower(),
                           tuple(None if not isinstance(v, str) else v for v in message.new)))
            index += 1
        elif isinstance(message, Delete):
            result.append((commit_lsn, index, "delete", (message.old[0],)))
            index += 1
        elif isinstance(message, LogicalMessage) and message.transactional:
            result.append((commit_lsn, index, "message", (message.prefix,)))
            index += 1
        elif isinstance(message, Truncate):  # one bronze row per table
            for _ in message.relation_ids:
                result.append((commit_lsn, index, "truncate", ()))
                index += 1
        elif isinstance(message, LogicalMessage):
            raise AssertionError("no non-transactional messages expected")
        elif isinstance(message, Commit):
            assert message.commit_lsn == commit_lsn
    return result
