"""Read one keyset chunk of a table and turn it into bronze snapshot rows, columnar.

The chunk is `COPY (SELECT ... ORDER BY key LIMIT n) TO STDOUT (FORMAT csv)` (or the
same rows by key range, see read_chunk) inside a REPEATABLE READ transaction whose
first statement records the snapshot. COPY renders
every value with its type's output function, exactly what pgoutput sends (`col::text`
is not the same: bool::text is 'true' where pgoutput sends 't', char(n)::text drops the
padding, inet::text adds the netmask). In CSV, SQL NULL is an unquoted empty field and
the empty string is `""`, so pyarrow keeps them apart. The rows never become Python
objects: parsing, the values list and the bronze batch are pyarrow operations.
"""

from __future__ import annotations

import select
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.csv as pcsv
from psycopg import pq, sql

from pipelines.backfill.source_tables import SourceTable, shape_fingerprint, table_shape
from pipelines.bronze.watermarks import Snapshot
from pipelines.bronze.schema import SHAPE_LISTS, SNAPSHOTS_SCHEMA
from pipelines.errors import DataError


@dataclass(frozen=True)
class RawChunk:
    """What one chunk's SELECT returned, still as Postgres CSV."""

    shape: SourceTable
    data: bytearray
    num_rows: int
    last_key: tuple[str, ...] | None  # in keyset (index) order: the next chunk starts after it
    snapshot: Snapshot
    read_at: datetime

    def parse(self) -> "Chunk":
        return Chunk(self.shape, parse_csv(self.data, len(self.shape.columns)), self.read_at)


@dataclass(frozen=True)
class Chunk:
    """A chunk's rows as text columns in table column order."""

    shape: SourceTable
    rows: pa.Table  # one pa.string() column per shape column; null = SQL NULL
    read_at: datetime

    @property
    def num_rows(self) -> int:
        return self.rows.num_rows


class ShapeCache:
    """The table's shape, read again from the catalog only when its fingerprint changes."""

    def __init__(self, table: str, publication: str) -> None:
        self.table = table
        self.publication = publication
        self._fingerprint: str | None = None
        self._shape: SourceTable | None = None

    def current(self, conn: psycopg.Connection) -> SourceTable:
        fingerprint = shape_fingerprint(conn, self.table)
        if self._shape is None or fingerprint != self._fingerprint:
            self._shape = table_shape(conn, self.table, self.publication)
            self._fingerprint = fingerprint
        return self._shape


def read_chunk(conn: psycopg.Connection, shapes: ShapeCache, after: tuple[str, ...] | None,
               limit: int, by_range: bool = False) -> RawChunk:
    """Snapshot, then the next `limit` rows after key `after`, in one REPEATABLE READ txn.

    In key order (ORDER BY key LIMIT n: an index scan), or `by_range`: first the key of
    the limit-th row (an index-only scan), then the rows up to it in any order, which
    Postgres reads as a bitmap heap scan in physical order. For a key scattered on disk
    (a random uuid) that costs Postgres ~20% less CPU than fetching heap pages in key
    order; for a key that follows the heap it costs more (measured). Same rows either
    way: both statements read the one snapshot.
    Takes no lock beyond the ACCESS SHARE every SELECT takes (it only waits for DDL).
    Leaves parsing to the caller: the next chunk's cursor comes from one row alone, so
    the next SELECT can start while this chunk is parsed and written elsewhere.
    """
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    try:
        snapshot, read_at = take_snapshot(conn)
        shape = shapes.current(conn)
        if by_range:
            _, _, upper_row = copy_out(conn, nth_key_statement(shape, after, limit))
            last_key = _key(upper_row, len(shape.order_columns), range(len(shape.order_columns)))
            data, rows, _ = copy_out(conn, range_statement(shape, after, last_key))
            if last_key is not None and rows != limit:  # the chunk would end the backfill
                raise DataError(f"{shape.table}: the {limit}th key after the cursor, "
                                f"{last_key!r}, read back {rows} rows, not {limit}: its "
                                "text does not round-trip through its type")
        else:
            data, rows, last_row = copy_out(conn, chunk_statement(shape, after, limit))
            last_key = row_key(shape, last_row)
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed:
            conn.execute("ROLLBACK")
        raise
    return RawChunk(shape, data, rows, last_key, snapshot, read_at)


# Rows of a first keyset chunk, until it shows how wide the rows are (50k rows of 50 kB
# would be 2.5 GB); later chunks hold as many as next_chunk_rows allows.
FIRST_CHUNK_ROWS = 1_000


def next_chunk_rows(rows: int, data_bytes: int, max_rows: int, max_bytes: int) -> int:
    """Rows for the next chunk: at most `max_rows`, and about `max_bytes` of CSV at the
    row width the last chunk (`rows` rows in `data_bytes` bytes) showed."""
    if not data_bytes:
        return max_rows
    return max(1, min(max_rows, max_bytes * rows // data_bytes))


def row_key(shape: SourceTable, row: bytes | None) -> tuple[str, ...] | None:
    """The keyset cursor (key values as text, in keyset order) of one CSV row."""
    return _key(row, len(shape.columns), [shape.columns.index(c) for c in shape.order_columns])


def _key(row: bytes | None, width: int, positions: Iterable[int]) -> tuple[str, ...] | None:
    """The values at `positions` of one CSV row of `width` columns (None: no row)."""
    if row is None:
        return None
    values = parse_csv(row, width)
    return tuple(values.column(i)[0].as_py() for i in positions)


def take_snapshot(conn: psycopg.Connection) -> tuple[Snapshot, datetime]:
    """The transaction's snapshot (the first statement of a REPEATABLE READ txn fixes it)."""
    xmin, xmax, xip, now = conn.execute(
        "SELECT pg_snapshot_xmin(s)::text, pg_snapshot_xmax(s)::text, "
        "ARRAY(SELECT x::text FROM pg_snapshot_xip(s) x ORDER BY 1), now() "
        "FROM pg_current_snapshot() s").fetchone()
    return Snapshot(int(xmin), int(xmax), tuple(sorted(int(x) for x in xip))), now


def chunk_statement(shape: SourceTable, after: tuple[str, ...] | None, limit: int) -> sql.Composed:
    """The keyset COPY: WHERE (k1, k2) > (v1::t1, v2::t2) ORDER BY k1, k2 LIMIT n."""
    return _copy(shape, shape.columns, _where(shape, after), limit)


def nth_key_statement(shape: SourceTable, after: tuple[str, ...] | None,
                      n: int) -> sql.Composed:
    """The key of the n-th row after `after` in key order (no row: fewer are left)."""
    return _copy(shape, shape.order_columns, _where(shape, after), 1, offset=n - 1)


def range_statement(shape: SourceTable, after: tuple[str, ...] | None,
                    upper: tuple[str, ...] | None) -> sql.Composed:
    """The rows with keys in (after, upper], in no particular order (no upper: all after)."""
    return _copy(shape, shape.columns, _where(shape, after, upper), None)


def _where(shape: SourceTable, after: tuple[str, ...] | None,
           upper: tuple[str, ...] | None = None) -> sql.Composable:
    conditions = [sql.SQL("({}) {} ({})").format(_keys(shape), sql.SQL(operator),
                                                 _key_values(shape, key))
                  for operator, key in ((">", after), ("<=", upper)) if key is not None]
    if shape.row_filter:  # the publication only sends rows matching its filter
        conditions.append(sql.SQL("({})").format(sql.SQL(shape.row_filter)))
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")


def _keys(shape: SourceTable) -> sql.Composable:
    return sql.SQL(", ").join(map(sql.Identifier, shape.order_columns))


def _key_values(shape: SourceTable, key: tuple[str, ...]) -> sql.Composable:
    """(v1::t1, v2::t2): a cursor's text values cast to the key columns' types."""
    if len(key) != len(shape.order_columns):
        raise ValueError(f"cursor {key!r} does not match key {shape.order_columns!r}")
    return sql.SQL(", ").join(
        sql.SQL("{}::{}").format(sql.Literal(value), sql.SQL(shape.sql_type(column)))
        for column, value in zip(shape.order_columns, key))


def _copy(shape: SourceTable, columns: tuple[str, ...], where: sql.Composable,
          limit: int | None, offset: int = 0) -> sql.Composed:
    """COPY (SELECT columns FROM table where [ORDER BY key OFFSET o LIMIT n]) TO STDOUT."""
    select = sql.SQL("SELECT {} FROM {}{}").format(
        sql.SQL(", ").join(map(sql.Identifier, columns)), shape.identifier, where)
    if limit is not None:
        if limit < 1 or offset < 0:
            raise ValueError(f"chunk limit must be positive, got {limit} (offset {offset})")
        select += sql.SQL(" ORDER BY {}").format(_keys(shape))
        if offset:
            select += sql.SQL(" OFFSET {}").format(sql.Literal(offset))
        select += sql.SQL(" LIMIT {}").format(sql.Literal(limit))
    return sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(select)


def copy_out(conn: psycopg.Connection,
             statement: sql.Composable) -> tuple[bytearray, int, bytes | None]:
    """All bytes a COPY TO STDOUT sends, the row count and the last row, read from libpq.

    libpq hands COPY data over one row at a time; psycopg's Copy object spends ~2.5x more
    CPU per row than this loop, and a blocking PQgetCopyData or PQgetResult would hold the
    GIL while it waits. So: non-blocking reads, and a GIL-free select() when the socket is
    drained. (A COPY that waits for a lock, e.g. behind a TRUNCATE, would otherwise hold
    the GIL until the transaction holding the lock commits, and that transaction's own
    client thread may need the GIL to commit: the process deadlocks.)
    """
    pgconn = conn.pgconn
    pgconn.send_query(statement.as_bytes(conn))
    result = _next_result(pgconn)
    if result is None or result.status != pq.ExecStatus.COPY_OUT:
        _drain(pgconn)
        raise _error(result, "COPY did not start")
    data = bytearray()
    rows, row, last = 0, None, None
    get_copy_data = pgconn.get_copy_data
    while True:
        size, row = get_copy_data(1)
        if size > 0:  # libpq returns exactly one row per call
            data += row
            rows += 1
            last = row
        elif size == 0:  # nothing buffered: wait for the socket without the GIL
            select.select([pgconn.socket], [], [])
            pgconn.consume_input()
        else:
            break
    failure = None
    while (result := _next_result(pgconn)) is not None:
        if result.status != pq.ExecStatus.COMMAND_OK and failure is None:
            failure = result
    if size == -2 or failure is not None:
        raise _error(failure, pgconn.get_error_message().decode(errors="replace"))
    return data, rows, None if last is None else bytes(last)


def _drain(pgconn: pq.abc.PGconn) -> None:
    while _next_result(pgconn) is not None:
        pass


def _next_result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """PQgetResult once it will not block: the wait for the server is a GIL-free select()."""
    while pgconn.is_busy():
        select.select([pgconn.socket], [], [])
        pgconn.consume_input()
    return pgconn.get_result()


def _error(result: pq.abc.PGresult | None, fallback: str) -> psycopg.Error:
    """The psycopg exception class for the result's SQLSTATE, as psycopg would raise."""
    if result is None:
        return psycopg.OperationalError(fallback.strip() or "COPY failed")
    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
    message = result.error_message.decode(errors="replace").strip() or fallback
    try:
        cls = psycopg.errors.lookup(sqlstate.decode()) if sqlstate else psycopg.DatabaseError
    except KeyError:
        cls = psycopg.DatabaseError
    return cls(message)


def parse_csv(data: bytes | bytearray, width: int) -> pa.Table:
    """Postgres CSV into `width` string columns: unquoted empty = NULL, "" = ''.

    One block on the calling thread: the pipeline already keeps both cores busy, and
    pyarrow's block-parallel parse costs ~40% more CPU for the same chunk (measured).
    A single block also gives single-chunk columns and no value straddles two blocks.
    """
    names = [f"c{i}" for i in range(width)]
    if not data:
        return pa.table({n: pa.array([], pa.string()) for n in names})
    convert = pcsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                  strings_can_be_null=True, quoted_strings_can_be_null=False,
                                  null_values=[""])
    parse = pcsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False)
    read = pcsv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + 1)
    return pcsv.read_csv(pa.py_buffer(data), read, parse, convert)


class SnapshotBuilder:
    """Turns one backfill's chunks into bronze/snapshots rows (SNAPSHOTS_SCHEMA), columnar.

    The columns that describe the table are built once for the largest chunk so far and
    sliced (zero-copy) for each chunk, so chunks whose size varies (wide rows, capped at
    a byte size) cost no rebuild. The shape lists (SHAPE_LISTS) are set on each chunk's
    first row only, null on the others: written on every row they were 17 list elements
    per 4 values of a narrow table, ~40% of the Parquet write (measured). One builder
    per table job: the arrays go away with it.
    """

    def __init__(self, backfill_id: str) -> None:
        self.backfill_id = backfill_id
        self._shape: SourceTable | None = None
        self._repeated: dict[str, pa.Array] = {}
        self._capacity = 0

    def rows(self, chunk: Chunk, chunk_id: int) -> pa.Table:
        n, shape = chunk.num_rows, chunk.shape
        width = len(shape.columns)
        # Column c's n values, however pyarrow chunked them, sit at [c * n, (c + 1) * n).
        by_column = pa.concat_arrays([part for column in chunk.rows.columns
                                      for part in column.chunks] or [pa.array([], pa.string())])
        offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
        values = pa.ListArray.from_arrays(offsets, by_column.take(_row_major(n, width)))
        repeated = self._repeated_columns(shape, n)
        arrays = [
            repeated["backfill_id"],
            pa.repeat(pa.scalar(chunk_id, pa.int64()), n),
            pa.array(np.arange(n, dtype=np.int64)),
            repeated["schema_name"], repeated["table_name"],
            *(repeated[name] for name in SHAPE_LISTS),
            values,
            pa.repeat(pa.scalar(chunk.read_at, SNAPSHOTS_SCHEMA.field("read_at").type), n),
        ]
        return pa.Table.from_arrays(arrays, schema=SNAPSHOTS_SCHEMA)

    def _repeated_columns(self, shape: SourceTable, n: int) -> dict[str, pa.Array]:
        if shape != self._shape or n > self._capacity:
            capacity = max(n, 1)
            self._shape, self._capacity = shape, capacity
            zeros = pa.array(np.zeros(capacity, dtype=np.int32))

            def repeated(value: object, type_: pa.DataType) -> pa.Array:
                return pa.array([value], type_).take(zeros)

            def first(value: object, type_: pa.DataType) -> pa.Array:
                return pa.concat_arrays([pa.array([value], type_),
                                         pa.nulls(capacity - 1, type_)])

            lists = dict(zip(SHAPE_LISTS, (shape.columns, shape.type_names, shape.type_oids,
                                           shape.type_mods, shape.key_columns)))
            self._repeated = {
                "backfill_id": repeated(self.backfill_id, pa.string()),
                "schema_name": repeated(shape.schema, pa.string()),
                "table_name": repeated(shape.name, pa.string()),
                **{name: first(list(value), SNAPSHOTS_SCHEMA.field(name).type)
                   for name, value in lists.items()},
            }
        return {name: array.slice(0, n) for name, array in self._repeated.items()}


def _row_major(n: int, width: int) -> np.ndarray:
    """For output position r * width + c: c * n + r, its place in the concatenation."""
    return (np.arange(n, dtype=np.int64)[:, None]
            + np.arange(width, dtype=np.int64)[None, :] * n).ravel()
