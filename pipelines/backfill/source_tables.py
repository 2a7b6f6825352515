"""What a backfill needs to know about a table, read from the Postgres catalog.

The columns are the ones pgoutput sends: not dropped, not generated, and within the
publication's column list if it has one, in table order. Types are described the way
pgoutput's Relation message does (atttypid, atttypmod), plus pg_type.typname.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pipelines.errors import ConfigError, SourceError
from pipelines.names import pg_identifier, split_table
from pipelines.source.setup import publishes_generated_columns


@dataclass(frozen=True)
class SourceTable:
    """One source table as the backfill reads it: columns, types, key, keyset order."""

    schema: str
    name: str
    columns: tuple[str, ...]  # table order
    type_names: tuple[str, ...]  # pg_type.typname: int4, _text, an enum's name
    type_oids: tuple[int, ...]
    type_mods: tuple[int, ...]  # atttypmod
    sql_types: tuple[str, ...]  # format_type(atttypid, atttypmod): casts cursor values
    key_columns: tuple[str, ...]  # primary key / replica identity index, table order
    order_columns: tuple[str, ...]  # the same columns in index order: the keyset order
    row_filter: str | None = None  # the publication's row filter, if any

    @property
    def table(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    def sql_type(self, column: str) -> str:
        return self.sql_types[self.columns.index(column)]


def regclass(table: str) -> str:
    """'schema.table' as text that `::regclass` resolves exactly (case kept)."""
    return pg_identifier(*split_table(table))


def table_shape(conn: psycopg.Connection, table: str, publication: str) -> SourceTable:
    """Read the table's published columns and key; the table must be in the publication."""
    schema, name = split_table(table)
    published = conn.execute(
        "SELECT attnames, rowfilter FROM pg_publication_tables "
        "WHERE pubname = %s AND schemaname = %s AND tablename = %s",
        (publication, schema, name)).fetchone()
    if published is None:
        raise ConfigError(f"table {table} is not in publication {publication!r}: add it to "
                          "source.tables and run lakehouse setup, then backfill it")
    column_list, row_filter = published
    # Stored generated columns are published from Postgres 18 on when the publication
    # says so (setup does): the snapshot then reads them too, as the stream sends them.
    generated = publishes_generated_columns(conn, publication)
    rows = conn.execute(
        "SELECT a.attname, t.typname, a.atttypid::int8, a.atttypmod, "
        "format_type(a.atttypid, a.atttypmod) "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "AND (a.attgenerated = '' OR (%s AND a.attgenerated = 's')) ORDER BY a.attnum",
        (regclass(table), generated)).fetchall()
    if column_list is not None:
        allowed = set(column_list)
        rows = [r for r in rows if r[0] in allowed]
    columns = tuple(r[0] for r in rows)
    order = key_order(conn, table)
    missing = [k for k in order if k not in columns]
    if missing:
        raise SourceError(f"table {table}: key column(s) {', '.join(missing)} are not "
                          "published (generated, or left out of the publication's column "
                          "list); silver could not merge by key")
    return SourceTable(
        schema=schema, name=name, columns=columns,
        type_names=tuple(r[1] for r in rows), type_oids=tuple(r[2] for r in rows),
        type_mods=tuple(r[3] for r in rows), sql_types=tuple(r[4] for r in rows),
        key_columns=tuple(c for c in columns if c in order), order_columns=order,
        row_filter=row_filter)


def shape_fingerprint(conn: psycopg.Connection, table: str) -> str:
    """Changes whenever a column is added, dropped or retyped, or the key index changes."""
    return conn.execute(
        "SELECT (SELECT string_agg(concat_ws(' ', attnum, attname, atttypid, atttypmod, "
        "attgenerated, attisdropped), ',' ORDER BY attnum) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0) || '|' || coalesce((SELECT "
        "string_agg(concat_ws(' ', indexrelid, indkey, indisprimary, indisreplident), ',') "
        "FROM pg_index WHERE indrelid = %s::regclass AND (indisprimary OR indisreplident)), '')",
        (regclass(table), regclass(table))).fetchone()[0]


def key_order(conn: psycopg.Connection, table: str) -> tuple[str, ...]:
    """The replica identity index's columns, else the primary key's, in index order."""
    rows = conn.execute(
        "WITH idx AS (SELECT i.indkey FROM pg_index i WHERE i.indrelid = %s::regclass "
        "AND (i.indisprimary OR i.indisreplident) "
        "ORDER BY i.indisreplident DESC, i.indisprimary DESC LIMIT 1) "
        "SELECT a.attname FROM idx, unnest(idx.indkey) WITH ORDINALITY k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = %s::regclass AND a.attnum = k.attnum "
        "ORDER BY k.ord", (regclass(table), regclass(table))).fetchall()
    if not rows:  # check_keys refuses such tables up front; this is a table altered since
        raise SourceError(f"table {table} has no primary key or replica identity index")
    return tuple(r[0] for r in rows)


def estimated_rows(conn: psycopg.Connection, table: str) -> int | None:
    """pg_class.reltuples (summed over partitions); None if never vacuumed or analyzed."""
    value = conn.execute(
        "SELECT CASE WHEN c.relkind = 'p' THEN (SELECT sum(p.reltuples) FILTER "
        "(WHERE p.reltuples >= 0) FROM pg_partition_tree(c.oid) t "
        "JOIN pg_class p ON p.oid = t.relid WHERE t.isleaf) ELSE c.reltuples END "
        "FROM pg_class c WHERE c.oid = %s::regclass", (regclass(table),)).fetchone()[0]
    return None if value is None or value < 0 else int(value)


def key_correlation(conn: psycopg.Connection, table: str, column: str) -> float | None:
    """pg_stats.correlation of a key column: how closely the heap follows its order
    (+-1: in order, 0: scattered, as a random uuid key); None before any ANALYZE."""
    schema, name = split_table(table)
    row = conn.execute(
        "SELECT correlation FROM pg_stats WHERE schemaname = %s AND tablename = %s "
        "AND attname = %s ORDER BY inherited DESC LIMIT 1", (schema, name, column)).fetchone()
    return None if row is None or row[0] is None else float(row[0])
