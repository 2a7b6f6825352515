"""Plain-text tables for people: byte for byte, whatever the terminal."""

import datetime as dt
from decimal import Decimal as D

import pytest

from pipelines.terminal import format_table


def test_format_table_aligns_numbers_right_and_text_left():
    rows = [(dt.date(2026, 3, 2), "Website", D("3.0000"), 7, True),
            (dt.datetime(2026, 3, 3, 9, 30, tzinfo=dt.timezone.utc), None, D("12.5000"), None,
             False)]
    assert format_table(["day", "project", "hours", "n", "billable"], rows) == (
        "day                       | project |   hours |    n | billable\n"
        "--------------------------+---------+---------+------+---------\n"
        "2026-03-02                | Website |  3.0000 |    7 | True\n"
        "2026-03-03T09:30:00+00:00 | NULL    | 12.5000 | NULL | False")


def test_format_table_is_plain_text_on_any_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    monkeypatch.setenv("FORCE_COLOR", "1")
    text = format_table(["name", "note"], [("[bold]x[/bold]", "y" * 60)])
    assert text == ("name           | note\n"
                    "---------------+" + "-" * 61 + "\n"
                    "[bold]x[/bold] | " + "y" * 60)


def test_format_table_without_rows_shows_the_header():
    assert format_table(["a", "bb"], []) == "a | bb\n--+---"
    with pytest.raises(ValueError, match="2 values for 1 columns"):
        format_table(["a"], [(1, 2)])
