"""Connections to the source database that fail with exit-code-3 errors, not tracebacks."""

from __future__ import annotations

import psycopg

from pipelines.errors import SourceError


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    """An autocommit connection; an unreachable server becomes a SourceError."""
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=10, **kwargs)
    except psycopg.OperationalError as exc:
        raise SourceError(f"cannot connect to the source database: {_first_line(exc)}. "
                          "Check source.dsn / LAKEHOUSE_SOURCE_DSN and that the server is up.") from exc


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
