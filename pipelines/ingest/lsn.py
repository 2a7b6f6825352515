"""LSN text form: Postgres prints a 64-bit WAL position as two hex halves, '16/B374D848'.

Config flags (`--until-lsn`), logs and SQL (`pg_lsn`) use the text form; the decoder
and the replication protocol use the integer. These two functions are the only bridge.
"""

from __future__ import annotations

import operator
import re

MAX_LSN = 2**64 - 1
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
