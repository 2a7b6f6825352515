"""A backfill killed (SIGKILL), stopped or cut off from the source resumes from its cursor."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter

import psycopg
import pytest

from pipelines.backfill.progress import ProgressDisplay
from pipelines.backfill.runner import BackfillOptions, run_backfill
from tests.support.backfill import select_text, setup_source, snapshot_rows, states
from tests.support.change_stream import chunk_windows, peek_events
from tests.support.cli import lakehouse, start_lakehouse
from tests.support.config import make_config, write_config

pytestmark = pytest.mark.pg_versions

ROWS = 2000
# The kill test's table: more chunks than a fast machine reads in its three killed runs
KILLED_ROWS = 10_000
CHUNK = 20
TEMPLATE = """
CREATE TABLE readings (sensor text, at int, value numeric, PRIMARY KEY (sensor, at));
INSERT INTO readings SELECT 's' || (i % 7), i, i * 1.5 FROM generate_series(1, {rows}) i;
"""
# The same rows under a one-column key in scattered heap order, analyzed: read by range
BY_RANGE_TEMPLATE = """
CREATE TABLE readings (sensor text, at int PRIMARY KEY, value numeric);
INSERT INTO readings SELECT 's' || (i % 7), i, i * 1.5 FROM generate_series(1, {rows}) i
ORDER BY md5(i::text);
ANALYZE readings;
"""
DDL = TEMPLATE.format(rows=ROWS)


def chunks_done(config) -> int:
    found = states(config)
    return found[0].chunks_done if found else 0


@pytest.mark.parametrize("template, key", [(TEMPLATE, "sensor, at"), (BY_RANGE_TEMPLATE, "at")],
                         ids=["key-order", "by-range"])
def test_sigkilled_backfill_resumes_from_cursor_with_new_chunk_ids(source_dsn, lake, tmp_path,
                                                                   template, key):
    setup_source(source_dsn, template.format(rows=KILLED_ROWS), ["public.readings"])
    config = make_config(source_dsn, lake, ["public.readings"])
    config_file = write_config(tmp_path / "lakehouse.yml", source_dsn, lake, ["public.readings"])

    cursors_at_kill, reserved_at_kill = [], []
    for pause in (0.0, 0.15, 0.3):
        before = chunks_done(config)
        process = start_lakehouse(config_file, "-q", "backfill", "--chunk-size", str(CHUNK),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while chunks_done(config) <= before and process.poll() is None:  # this run's progress
            assert time.monotonic() < deadline, "backfill made no progress"
            time.sleep(0.02)
        time.sleep(pause)  # then kill it somewhere mid-chunk
        assert process.poll() is None, "backfill finished before it could be killed"
        process.send_signal(signal.SIGKILL)
        process.wait()
        state = states(config)[0]
        assert state.status == "running"
        cursors_at_kill.append(state.cursor)
        reserved_at_kill.append(state.chunk_ids_reserved)
    kills = len(cursors_at_kill)

    final = lakehouse(config_file, "backfill", "--chunk-size", str(CHUNK), check=False)
    assert final.returncode == 0, final.stderr
    assert "resuming backfill" in final.stderr
    assert ("chunks are read by key range" in final.stderr) == (key == "at")

    state = states(config)[0]
    assert len(states(config)) == 1  # resumed, never restarted
    assert state.status == "done" and state.rows_done == KILLED_ROWS
    assert state.finished_at is not None

    # Chunk ids never repeat: each id has one low watermark; each run started at the
    # block past the ids the killed run had reserved, and reserved no more than it used.
    events = peek_events(source_dsn)
    lows = Counter(e.watermark.chunk_id for e in events
                   if e.kind == "watermark" and e.watermark.kind == "low")
    assert set(lows.values()) == {1}
    starts = [0, *reserved_at_kill]
    assert all(start % 100 == 0 for start in starts) and starts == sorted(set(starts))
    assert set(starts) <= set(lows)  # every run began with the first id of its own block
    assert state.chunk_ids_reserved == (max(lows) // 100 + 1) * 100

    # Each resumed run's first chunk starts right after the cursor persisted before the
    # kill; the chunks read after that persisted cursor were read again (new ids).
    # A kill re-reads what was read after the last saved cursor (saved at most every
    # CURSOR_SAVE_SECONDS), never the whole table again: that the resumed runs start at
    # the cursor is asserted exactly below.
    rows = snapshot_rows(config)
    assert KILLED_ROWS < len(rows) < (kills + 1) * KILLED_ROWS
    for first_chunk, cursor in zip(reserved_at_kill, cursors_at_kill):
        read = {tuple(r["values"][:2]) for r in rows if r["chunk_id"] == first_chunk}
        after = ", ".join(f"'{value}'" for value in cursor)
        successors = select_text(source_dsn, f"SELECT sensor, at FROM readings WHERE ({key}) "
                                 f"> ({after}) ORDER BY {key} LIMIT {CHUNK}")
        assert read == set(successors)

    # Latest applicable chunk per key: every row exactly once, with its current values.
    windows = chunk_windows(events, "public.readings")
    applied = [r for r in rows if (r["backfill_id"], r["chunk_id"]) in windows]
    latest: dict[tuple, tuple] = {}
    for chunk in sorted({(r["backfill_id"], r["chunk_id"]) for r in applied},
                        key=lambda c: windows[c].high):
        in_chunk = [r for r in applied if (r["backfill_id"], r["chunk_id"]) == chunk]
        keys = Counter(tuple(r["values"][:2]) for r in in_chunk)
        assert set(keys.values()) == {1}
        latest.update((tuple(r["values"][:2]), tuple(r["values"])) for r in in_chunk)
    assert sorted(latest.values()) == sorted(select_text(source_dsn, "SELECT * FROM readings"))


def test_stop_request_finishes_chunks_in_flight_then_resumes(source_dsn, lake):
    """Ctrl-C / SIGTERM: the chunks in flight are committed, the state stays resumable."""
    setup_source(source_dsn, DDL, ["public.readings"])
    config = make_config(source_dsn, lake, ["public.readings"])
    stop = threading.Event()

    class StopAfterFirstChunk(ProgressDisplay):
        def advance(self, table: str, rows: int) -> None:
            super().advance(table, rows)
            stop.set()

    [first] = run_backfill(config, BackfillOptions(chunk_size=CHUNK),
                           StopAfterFirstChunk(tty=False), stop)
    assert first.status == "interrupted" and 0 < first.rows < ROWS
    state = states(config)[0]
    assert state.status == "running" and state.rows_done == first.rows  # all of it persisted
    [second] = run_backfill(config, BackfillOptions(chunk_size=500))
    assert second.status == "done" and first.rows + second.rows == ROWS
    assert sorted(tuple(r["values"]) for r in snapshot_rows(config)) == \
        sorted(select_text(source_dsn, "SELECT * FROM readings"))


def test_lost_source_connection_fails_the_table_with_exit_3_and_resumes(source_dsn, lake):
    setup_source(source_dsn, DDL, ["public.readings"])
    config = make_config(source_dsn, lake, ["public.readings"])

    class CutConnectionsAfterFirstChunk(ProgressDisplay):
        def advance(self, table: str, rows: int) -> None:
            super().advance(table, rows)
            with psycopg.connect(source_dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = 'lakehouse backfill'")

    [failed] = run_backfill(config, BackfillOptions(chunk_size=CHUNK),
                            CutConnectionsAfterFirstChunk(tty=False))
    assert failed.status == "failed" and failed.error.exit_code == 3
    assert "backfill of public.readings failed" in str(failed.error)
    state = states(config)[0]
    assert state.status == "failed" and state.error and state.rows_done >= CHUNK

    [resumed] = run_backfill(config, BackfillOptions(chunk_size=500))
    assert resumed.status == "done" and resumed.backfill_id == failed.backfill_id
    latest: dict[tuple, tuple] = {}
    for row in sorted(snapshot_rows(config), key=lambda r: r["chunk_id"]):
        latest[tuple(row["values"][:2])] = tuple(row["values"])
    assert sorted(latest.values()) == sorted(select_text(source_dsn, "SELECT * FROM readings"))
