"""Names and literals as the pipeline writes them: a source table's qualified name, and
quoting for the three SQL dialects it writes (Spark SQL, Postgres, and the SQL-standard
predicates delta-rs takes).

Every quoted name or value in a statement is built here, so that no statement quotes a
name one way and another statement another.
"""

from __future__ import annotations

from datetime import date

DEFAULT_SCHEMA = "public"  # a table named without a schema is in it, as in Postgres


def qualify_table(name: str) -> str:
    """'schema.table' for a table named with or without its schema ('items' is public's)."""
    return name if "." in name else f"{DEFAULT_SCHEMA}.{name}"


def split_table(qualified: str) -> tuple[str, str]:
    """'schema.table' as (schema, table); the table part may itself hold dots."""
    schema, table = qualified.split(".", 1)
    return schema, table


def quote(name: str) -> str:
    """One Spark SQL identifier part in backticks (a backtick inside is doubled)."""
    return "`" + name.replace("`", "``") + "`"


def spark_string(value: str) -> str:
    """A Spark SQL string literal: Spark reads a backslash in quotes as an escape."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def spark_literal(value: object) -> str:
    """A Spark SQL literal of a key value: text, a date, or an integer."""
    if isinstance(value, str):
        return spark_string(value)
    if isinstance(value, date):
        return f"DATE'{value.isoformat()}'"
    return str(int(value))


def standard_string(value: str) -> str:
    """A SQL-standard string literal (a quote inside is doubled), as delta-rs predicates
    take it."""
    return "'" + value.replace("'", "''") + "'"


def pg_identifier(*parts: str) -> str:
    """A Postgres name, every part double-quoted ("schema"."table"): for text that
    `::regclass` resolves exactly and for replication commands, which take no bind
    parameters."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in parts)
