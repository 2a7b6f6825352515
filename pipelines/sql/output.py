"""A query's result as text: an aligned table for people, CSV, JSON or Markdown for tools.

Pure functions of the column names and the rows, so each format is tested byte for byte.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import json
import math
from decimal import Decimal
from typing import Any, Callable, Sequence

from pipelines.terminal import cell_text, format_table, is_number

Rows = Sequence[Sequence[Any]]


def as_csv(columns: Sequence[str], rows: Rows) -> str:
    """RFC 4180 CSV with a header line; NULL is an empty field."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([["" if v is None else _text(v) for v in row] for row in rows])
    return out.getvalue()


def as_json(columns: Sequence[str], rows: Rows) -> str:
    """A JSON array of one object per row, one row per line (DuckDB's -json shape):
    numbers stay numbers (decimals keep every digit), times are ISO 8601 strings."""
    lines = ["{" + ",".join(f"{json.dumps(c)}:{_json_value(v)}" for c, v in zip(columns, row))
             + "}" for row in rows]
    return "[" + ",\n".join(lines) + "]\n"


def as_markdown(columns: Sequence[str], rows: Rows) -> str:
    """A GitHub-flavoured Markdown table; numeric columns right-aligned."""
    numeric = [bool(rows) and all(is_number(r[i]) or r[i] is None for r in rows)
               for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ")
                                 for c in cells) + " |"

    out = [line(columns), "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    out += [line([cell_text(v) for v in row]) for row in rows]
    return "\n".join(out) + "\n"


def as_table(columns: Sequence[str], rows: Rows) -> str:
    """The aligned table a terminal shows, with the row count under it (as psql does)."""
    count = f"({len(rows)} row{'' if len(rows) == 1 else 's'})"
    return f"{format_table(columns, rows)}\n{count}\n"


FORMATS: dict[str, Callable[[Sequence[str], Rows], str]] = {
    "table": as_table, "csv": as_csv, "json": as_json, "markdown": as_markdown}


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    return cell_text(value)


def _json_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool) or isinstance(value, int):
        return json.dumps(value)
    if isinstance(value, float):
        return json.dumps(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return json.dumps(value.isoformat())
    if isinstance(value, (bytes, bytearray)):
        return json.dumps(base64.b64encode(value).decode())
    if hasattr(value, "asDict"):  # a struct: a pyspark Row, a tuple with field names
        return _json_value(value.asDict())
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_json_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_json_value(v)}"
                              for k, v in value.items()) + "}"
    return json.dumps(str(value))
