"""Positions: the LSN text form as Postgres's pg_lsn type spells it, and the sortable number."""

from __future__ import annotations

import pytest

from pipelines.positions import INDEX_DIGITS, MAX_LSN, format_lsn, parse_lsn, position_number


@pytest.mark.parametrize(
    ("lsn", "text"),
    [
        (0, "0/0"),
        (0x16_B374D848, "16/B374D848"),
        (0x1_00000000, "1/0"),
        (2**31, "0/80000000"),
        (MAX_LSN, "FFFFFFFF/FFFFFFFF"),
    ],
)
def test_format_and_parse_round_trip(lsn, text):
    assert format_lsn(lsn) == text
    assert parse_lsn(text) == lsn


def test_parse_accepts_lowercase_and_leading_zeros():
    assert parse_lsn("0016/b374d848") == 0x16_B374D848


@pytest.mark.parametrize(
    "text",
    ["", "16", "/", "16/", "/B374D848", "16/B374D848/0", "G/0", "123456789/0", "0/123456789",
     " 16/B374D848", "16/B374D848\n", "0x16/0", "1_6/0", "-1/0", "+1/0"],
)
def test_parse_rejects_malformed(text):
    with pytest.raises(ValueError, match="is not an LSN"):
        parse_lsn(text)


@pytest.mark.parametrize("lsn", [-1, MAX_LSN + 1])
def test_format_rejects_out_of_range(lsn):
    with pytest.raises(ValueError, match="outside"):
        format_lsn(lsn)


def test_format_rejects_non_integers():
    with pytest.raises(TypeError):
        format_lsn(1.0)  # type: ignore[arg-type]


def test_position_number_sorts_as_positions_do():
    positions = [(0, 0), (0, 9), (1, 0), (1, 10), (2**63, 0), (MAX_LSN, 10**INDEX_DIGITS - 1)]
    numbers = [position_number(p) for p in positions]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert position_number((0x16_B374D848, 7)) == 0x16_B374D848 * 10**10 + 7
