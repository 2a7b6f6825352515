"""Positions: where a change sits in the change stream, the project's central order.

A position is `(commit_lsn, change_index)`: the commit LSN of the change's transaction
and the change's 0-based index inside it (docs/architecture.md, "Positions"). Tuples
compare as positions do. Two more forms exist, both defined here only:

- the LSN's text form, which Postgres prints as two hex halves ('16/B374D848') and config
  flags (`--until-lsn`), logs and SQL (`pg_lsn`) use;
- one sortable number, `commit_lsn * 10^10 + change_index` (history tables keep it as
  DECIMAL(38,0)): a change's LSN is the leading digits, its index the last ten.

Pure: the engine's twins of the order and the number are in pipelines.position_columns.
"""

from __future__ import annotations

import operator
import re

Position = tuple[int, int]  # (commit_lsn, change_index)
START: Position = (-1, -1)  # before every position: a table applied from nothing starts here
MAX_LSN = 2**64 - 1
INDEX_DIGITS = 10  # the change index's digits in the sortable number

# pg_lsn_in accepts 1-8 hex digits on each side of the slash and nothing else.
_LSN_TEXT = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def format_lsn(lsn: int) -> str:
    """Return the Postgres text form of `lsn` (uppercase hex, no padding)."""
    lsn = operator.index(lsn)
    if not 0 <= lsn <= MAX_LSN:
        raise ValueError(f"LSN {lsn} is outside 0..2**64-1")
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """Parse 'XXXXXXXX/XXXXXXXX' as Postgres does; ValueError on anything else."""
    match = _LSN_TEXT.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an LSN; expected hex 'HI/LO' such as '16/B374D848'")
    return int(match[1], 16) << 32 | int(match[2], 16)


def position_number(position: Position) -> int:
    """A position as one sortable number (exact: Python integers do not overflow)."""
    lsn, index = position
    return lsn * 10 ** INDEX_DIGITS + index
