"""The DBLog property: snapshot chunks + the change stream reconcile to the live table.

While the backfill reads, a workload inserts, updates (also primary keys, and rows whose
TOASTed body it leaves alone) and deletes rows around the chunk being read. Afterwards
docs/architecture.md's reconcile, written out in tests/support/change_stream.py, applied to bronze's
snapshot rows and the slot's changes must give `SELECT * FROM docs` exactly.
"""

from __future__ import annotations

import random
import threading

import psycopg
import pytest

from pipelines.backfill.progress import ProgressDisplay
from pipelines.backfill.runner import BackfillOptions, run_backfill
from tests.support.backfill import select_text, setup_source, snapshot_rows
from tests.support.change_stream import UNKNOWN, chunk_windows, peek_events, reconcile
from tests.support.config import make_config

pytestmark = pytest.mark.pg_versions

ROWS = 1500
DDL = f"""
CREATE TABLE docs (id int PRIMARY KEY, rev int NOT NULL, title text, body text);
ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
INSERT INTO docs SELECT 2 * i, 0, 'title ' || i,
    CASE WHEN i % 3 = 0 THEN repeat('body ' || i || ' ', 600) ELSE 'short ' || i END
FROM generate_series(1, {ROWS}) i ORDER BY {{order}};
ANALYZE docs;
"""  # even ids exist before the slot; inserts and key changes use odd ids in between
LAYOUTS = {"key-order": "i", "scattered": "md5(i::text)"}  # scattered: chunks read by range


class Cursor(ProgressDisplay):
    """Remembers how far the backfill got, so the workload can aim at the current chunk."""

    def __init__(self) -> None:
        super().__init__(tty=False, log_seconds=3600)
        self.rows = 0

    def advance(self, table: str, rows: int) -> None:
        self.rows += rows
        super().advance(table, rows)


def workload(dsn: str, cursor: Cursor, stop: threading.Event, seed: int, done: list) -> None:
    rng = random.Random(seed)
    ids = {2 * i for i in range(1, ROWS + 1)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '1s'")  # a lock wait would fail the test
        while not stop.is_set():
            near = 2 * cursor.rows  # ids are ~2x the rows read so far
            pool = sorted(i for i in ids if abs(i - near) < 120) or sorted(ids)
            with conn.transaction():
                for _ in range(rng.choice((1, 1, 2, 3))):
                    target = rng.choice(pool)
                    roll = rng.random()
                    if target not in ids:
                        continue
                    if roll < 0.35:  # body untouched: pgoutput sends it as unchanged TOAST
                        conn.execute("UPDATE docs SET rev = rev + 1, title = %s WHERE id = %s",
                                     (f"t{rng.random():.6f}", target))
                    elif roll < 0.5:
                        big = rng.random() < 0.5
                        conn.execute("UPDATE docs SET body = %s, rev = rev + 1 WHERE id = %s",
                                     (("new " * 900) if big else f"new {target}", target))
                    elif roll < 0.65:  # key change; a TOASTed body is rewritten with it
                        new = target + rng.choice((-3, -1, 1, 3, 41, -41))
                        if new <= 0 or new in ids:
                            continue
                        conn.execute(
                            "UPDATE docs SET id = %s, rev = rev + 1, body = CASE WHEN "
                            "length(body) > 1000 THEN body || '!' ELSE body END WHERE id = %s",
                            (new, target))
                        ids.discard(target)
                        ids.add(new)
                    elif roll < 0.8:
                        conn.execute("DELETE FROM docs WHERE id = %s", (target,))
                        ids.discard(target)
                    else:
                        new = target + 1 if (target + 1) not in ids else target + 5
                        if new in ids:
                            continue
                        conn.execute("INSERT INTO docs VALUES (%s, 0, 'inserted', %s)",
                                     (new, "ins " * (800 if rng.random() < 0.3 else 2)))
                        ids.add(new)
                    done[0] += 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_snapshot_chunks_and_changes_reconcile_to_the_live_table(source_dsn, lake, layout,
                                                                 caplog):
    setup_source(source_dsn, DDL.format(order=LAYOUTS[layout]), ["public.docs"])
    config = make_config(source_dsn, lake, ["public.docs"])
    cursor, stop, done = Cursor(), threading.Event(), [0]
    writer = threading.Thread(target=workload, args=(source_dsn, cursor, stop, 7, done))
    writer.start()
    try:
        with caplog.at_level("INFO", logger="pipelines.backfill.job"):
            [result] = run_backfill(config, BackfillOptions(chunk_size=30), display=cursor)
    finally:
        stop.set()
        writer.join()
    assert result.error is None and result.status == "done"
    assert done[0] > 50, "the workload barely ran"
    assert ("chunks are read by key range" in caplog.text) == (layout == "scattered")

    events = peek_events(source_dsn)
    rows = snapshot_rows(config)
    by_chunk: dict[int, list] = {}
    for row in sorted(rows, key=lambda r: r["row_index"]):
        by_chunk.setdefault(row["chunk_id"], []).append(int(row["values"][0]))
    in_key_order = all(ids == sorted(ids) for ids in by_chunk.values())
    assert in_key_order == (layout == "key-order")  # range reads return heap order
    expected = reconcile(events, rows, "public.docs")
    live = select_text(source_dsn, "SELECT * FROM docs")
    columns = ("id", "rev", "title", "body")
    actual = {(row[0],): dict(zip(columns, row)) for row in live}
    unknown = [k for k, row in expected.items() if UNKNOWN in row.values()]
    assert not unknown, f"TOAST values nobody supplied for keys {unknown[:5]}"
    missing = actual.keys() - expected.keys()
    extra = expected.keys() - actual.keys()
    wrong = [k for k in actual.keys() & expected.keys() if actual[k] != expected[k]]
    assert not (missing or extra or wrong), (sorted(missing)[:5], sorted(extra)[:5], wrong[:5])

    # The run really raced: some chunk rows were stale and had to be dropped.
    windows = chunk_windows(events, "public.docs")
    changed = [e for e in events if e.kind != "watermark"]
    dropped = sum(1 for r in rows if (w := windows.get((r["backfill_id"], r["chunk_id"])))
                  and any(w.covers(e) and (r["values"][0],) in (e.new_key, e.old_key)
                          for e in changed))
    assert dropped > 0
