"""DBLog watermarks: logical messages that bracket each backfill chunk in the WAL.

Each watermark is `pg_logical_emit_message(true, WATERMARK_PREFIX, json)` committed in its
own transaction, so it reaches bronze/changes as a message row with a position like any
change. The high watermark also carries the chunk SELECT's snapshot: a transaction whose
commit precedes the low watermark in the WAL can still be invisible to the SELECT
(commit order is not visibility order), and the snapshot tells silver which ones were.
The format and its parsing live in pipelines/bronze/watermarks.py (silver reads them).
"""

from __future__ import annotations

import psycopg

from pipelines.bronze.schema import WATERMARK_PREFIX
from pipelines.bronze.watermarks import Watermark


def emit_watermark(conn: psycopg.Connection, watermark: Watermark) -> str:
    """Write the watermark to the WAL in its own committed transaction; returns its LSN."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("a watermark needs an autocommit connection outside a transaction")
    return conn.execute("SELECT pg_logical_emit_message(true, %s, %s)::text",
                        (WATERMARK_PREFIX, watermark.to_json())).fetchone()[0]
