"""Backfill progress: bars through a real pseudo-terminal, plain log lines elsewhere."""

from __future__ import annotations

import io
import logging
import os
import re
import threading

from rich.console import Console
from rich.logging import RichHandler

from pipelines.backfill.progress import ProgressDisplay

STYLE = re.compile(r"\x1b\[[0-9;]*m")  # colours
MOVES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")  # cursor moves and erasing: a new frame


def read_all(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the terminal's other side is closed
            return
        if not data:
            return
        into.append(data)


def test_progress_on_a_terminal_shows_rows_rate_and_eta_with_log_lines_above(tmp_path):
    leader, follower = os.openpty()
    received: list[bytes] = []
    reader = threading.Thread(target=read_all, args=(leader, received))
    reader.start()
    with open(follower, "w", encoding="utf-8") as terminal:
        console = Console(file=terminal, width=120)
        now = [0.0]
        # Redrawn only when asked (and by log records), on a clock the test moves: the
        # frames do not depend on rich's refresh thread or on the machine's speed.
        display = ProgressDisplay(console, clock=lambda: now[0], auto_refresh=False)
        assert display.tty  # a terminal: bars, decided by the console
        logger = logging.getLogger("test_progress_terminal")
        logger.addHandler(RichHandler(console=console, show_path=False))
        logger.propagate = False
        display.start("public.users", 1000)
        display.start("public.notes", None)
        for _ in range(3):
            now[0] += 1
            display.advance("public.users", 100)
        display.refresh()
        logger.warning("a log record while the bars are live")
        now[0] += 1
        display.finish("public.notes", "done")
        display.finish("public.users", "done")
    reader.join(timeout=10)
    os.close(leader)
    screen = MOVES.sub("\n", STYLE.sub("", b"".join(received).decode("utf-8", "replace")))
    lines = [line for line in screen.splitlines() if line.strip()]
    running = [line for line in lines if "public.users" in line and "ETA" in line]
    assert running, screen
    assert re.search(r"public\.users +━*.* 300 / ~1,000 rows  30% +100 rows/s +ETA 7s",
                     running[-1]), running[-1]  # 700 rows left at 100 rows/s
    assert any(re.search(r"public\.notes .* 0 rows .*done in 4s", line) for line in lines)
    assert any(re.search(r"public\.users .* 300 / ~1,000 rows  30% +75 rows/s +done in 4s",
                         line) for line in lines)  # the whole run's rate
    record = [line for line in lines if "a log record while the bars are live" in line]
    assert record and all("rows" not in line for line in record)  # whole, not through a bar


def test_progress_elsewhere_is_a_log_line_per_table_every_interval(caplog):
    caplog.set_level("INFO")
    now = [0.0]
    display = ProgressDisplay(Console(file=io.StringIO()), log_seconds=0,
                              clock=lambda: now[0])
    assert not display.tty  # not a terminal: no bars
    display.start("public.users", 100)
    now[0] = 0.5
    display.advance("public.users", 5)
    now[0] = 1.0
    display.advance("public.users", 3)
    display.finish("public.users", "done")
    lines = [r.getMessage() for r in caplog.records if r.name == "pipelines.backfill.progress"]
    assert lines == ["backfill public.users  0 / ~100 rows  0%  0 rows/s",
                     "backfill public.users  5 / ~100 rows  5%  10 rows/s  ETA 9s",
                     "backfill public.users  8 / ~100 rows  8%  8 rows/s  ETA 11s",
                     "backfill public.users  8 / ~100 rows  8%  8 rows/s  done in 1s"]

    caplog.clear()
    rarely = ProgressDisplay(Console(file=io.StringIO()), log_seconds=3600)
    rarely.start("public.notes", None)
    rarely.advance("public.notes", 5)
    assert [r.getMessage() for r in caplog.records] == ["backfill public.notes  0 rows  0 rows/s"]
