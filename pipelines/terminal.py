"""What people read in a terminal: the process's rich consoles and plain-text tables.

One stderr console is shared by the log handler and the progress bars, so a log record
emitted while bars are live prints above them instead of through them. Tables use rich's
built-in ASCII box without the outer edge (psql's look): they stay readable in log files,
CI pages and any terminal encoding, and render the same on every terminal width.
"""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from functools import cache
from typing import Any, Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Wide enough that no real table or line is ever wrapped or cropped: its text depends only
# on its content, never on the width of the terminal it happens to be printed on.
_TABLE_WIDTH = 1_000_000


@cache
def stderr_console() -> Console:
    """The console for progress bars and log records (resolves sys.stderr at each write)."""
    return Console(stderr=True)


@cache
def stdout_console() -> Console:
    """The console for a command's intended output (resolves sys.stdout at each write).
    Off a terminal it never wraps: what a job or a test captures has no terminal width."""
    console = Console(emoji=False)  # a value like ":x:" stays as it is
    if not console.is_terminal:
        console.width = _TABLE_WIDTH
    return console


def format_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """`rows` under `columns` as an aligned ASCII table without ANSI codes or trailing
    blanks: numbers right-aligned, None as NULL, dates and datetimes in ISO 8601."""
    if not columns:
        raise ValueError("a table needs at least one column")
    cells = [list(row) for row in rows]
    for row in cells:
        if len(row) != len(columns):
            raise ValueError(f"a row has {len(row)} values for {len(columns)} columns: {row!r}")
    table = Table(box=box.ASCII, show_edge=False, pad_edge=False, header_style="",
                  highlight=False)
    for i, name in enumerate(columns):
        numeric = bool(cells) and all(is_number(row[i]) or row[i] is None for row in cells)
        table.add_column(Text(name), justify="right" if numeric else "left", no_wrap=True)
    for row in cells:
        table.add_row(*(Text(cell_text(value)) for value in row))  # Text: never read as markup
    console = Console(file=io.StringIO(), width=_TABLE_WIDTH, color_system=None,
                      force_terminal=False, legacy_windows=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


def is_number(value: Any) -> bool:
    """Whether a cell is a number (right-aligned in a table); a bool is not."""
    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


def cell_text(value: Any) -> str:
    """A cell as people read it: NULL, ISO 8601 times, else str()."""
    if value is None:
        return "NULL"
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    return str(value)
