"""A query's result as text: an aligned table for people, CSV, JSON or Markdown for tools.

Pure functions of the column names and the rows, yielding text as they go, so each
format is tested byte for byte.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import io
import json
import math
from decimal import Decimal
from typing import Any, Callable, Iterable, Iterator, Sequence

from pipelines.terminal import cell_text, format_table, is_number

Rows = Iterable[Sequence[Any]]
# The formats written as the rows arrive, so a result of any size streams through; the
# others align columns over every row, so the command caps their rows.
STREAMED = ("csv", "json")


def csv_chunks(columns: Sequence[str], rows: Rows) -> Iterator[str]:
    """RFC 4180 CSV with a header line, a row at a time; NULL is an empty field."""
    line = io.StringIO()
    writer = csv.writer(line, lineterminator="\n")
    writer.writerow(columns)
    yield line.getvalue()
    for row in rows:
        line.seek(0)
        line.truncate()
        writer.writerow(["" if v is None else _text(v) for v in row])
        yield line.getvalue()


def json_chunks(columns: Sequence[str], rows: Rows) -> Iterator[str]:
    """A JSON array of one object per row, one row per line (DuckDB's -json shape):
    numbers stay numbers (decimals keep every digit), times are ISO 8601 strings."""
    separator = "["
    for row in rows:
        yield separator + "{" + ",".join(f"{json.dumps(c)}:{_json_value(v)}"
                                         for c, v in zip(columns, row)) + "}"
        separator = ",\n"
    yield "[]\n" if separator == "[" else "]\n"


def markdown_chunks(columns: Sequence[str], rows: Rows) -> Iterator[str]:
    """A GitHub-flavoured Markdown table; numeric columns right-aligned."""
    rows = list(rows)
    numeric = [bool(rows) and all(is_number(r[i]) or r[i] is None for r in rows)
               for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ")
                                 for c in cells) + " |\n"

    yield line(columns)
    yield "|" + "|".join("---:" if n else "---" for n in numeric) + "|\n"
    for row in rows:
        yield line([cell_text(v) for v in row])


def table_chunks(columns: Sequence[str], rows: Rows) -> Iterator[str]:
    """The aligned table a terminal shows, with the row count under it (as psql does)."""
    rows = list(rows)
    yield f"{format_table(columns, rows)}\n({len(rows)} row{'' if len(rows) == 1 else 's'})\n"


FORMATS: dict[str, Callable[[Sequence[str], Rows], Iterator[str]]] = {
    "table": table_chunks, "csv": csv_chunks, "json": json_chunks,
    "markdown": markdown_chunks}


def _text(value: Any) -> str:
    """A CSV field: arrays, maps and structs as JSON, binary as base64."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, (list, tuple, dict)):
        return _json_value(value)
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
