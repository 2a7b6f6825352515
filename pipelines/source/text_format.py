"""Session settings that fix how Postgres renders values as text.

The ingest's walsender (pgoutput runs the types' output functions with its session's
settings) and the backfill's SELECT connection use the same settings, so a value reads
the same whichever path brought it to bronze, and silver parses one format.
"""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

TEXT_FORMAT_SETTINGS = {
    "TimeZone": "UTC",  # timestamptz as '2026-01-05 08:00:00+00'
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "iso_8601",  # interval as 'P1DT2H3M'
    "extra_float_digits": "1",  # shortest exact float text
    "bytea_output": "hex",  # bytea as '\x0a0b'
}


def with_text_format(dsn: str, **extra: str) -> str:
    """`dsn` plus startup options that pin the text format (appended to any given)."""
    params = conninfo_to_dict(dsn)
    settings = " ".join(f"-c {key}={value.replace(' ', chr(92) + ' ')}"
                        for key, value in TEXT_FORMAT_SETTINGS.items())
    params["options"] = f"{params.get('options', '')} {settings}".strip()
    params.update(extra)
    return make_conninfo(**params)
