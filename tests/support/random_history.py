"""A seeded random history of one Postgres table, played against a pure-Python model:
rows older than the slot, inserts, updates leaving a TOASTed column unchanged, deletes,
re-inserts, key changes, truncates, and DBLog backfills racing with the changes; what
ingest and backfill land for it, in order (the silver property tests' source)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.support.bronze_builder import BronzeLake, Table

T = Table()
EPOCH = 1 << 32  # the snapshot's 64-bit xids are in epoch 1; bronze xids are 32-bit


@dataclass
class History:
    """The source table and everything ingest and backfill landed for it, in order."""

    rng: random.Random
    rows: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (name, doc)
    lsn: int = 100
    xid: int = 4000
    next_id: int = 1
    # Each landing: ("changes", rows) or ("snapshots", rows), in the order they land.
    landed: list[tuple[str, list[dict]]] = field(default_factory=list)
    last_txn: tuple[int, dict[int, tuple[str, str] | None]] | None = None

    def _txn(self, changes: list) -> None:
        """Commit one transaction of (op, ...) tuples; lands its bronze rows."""
        self.lsn += self.rng.randint(1, 3)
        self.xid += 1
        bronze, before = [], {}
        for index, change in enumerate(changes):
            kind, key = change[0], change[1]
            if key not in before:
                before[key] = self.rows.get(key)
            if kind == "insert":
                self.rows[key] = change[2]
                bronze.append(T.insert(self.lsn, index, self.xid, id=key, name=change[2][0],
                                       doc=change[2][1]))
            elif kind == "update":
                name, doc, toast, new_key = change[2], change[3], change[4], change[5]
                old_doc = self.rows.pop(key)[1]
                target = new_key if new_key is not None else key
                before.setdefault(target, None)
                self.rows[target] = (name, old_doc if toast else doc)
                bronze.append(T.update(self.lsn, index, self.xid, id=target, name=name,
                                       doc=None if toast else doc,
                                       unchanged=["doc"] if toast else (),
                                       old_key=None if new_key is None else {"id": key}))
            elif kind == "delete":
                del self.rows[key]
                bronze.append(T.delete(self.lsn, index, self.xid, id=key))
        self.landed.append(("changes", bronze))
        self.last_txn = (self.xid, before)

    def truncate(self) -> None:
        self.lsn += 1
        self.xid += 1
        self.last_txn = (self.xid, {k: v for k, v in self.rows.items()})
        self.rows.clear()
        self.landed.append(("changes", [T.truncate(self.lsn, 0, self.xid)]))

    def watermark(self, chunk: str, kind: str, snapshot: dict | None = None,
                  rows: int | None = None, backfill_id: str = "bf",
                  keys: dict | None = None) -> None:
        self.lsn += 1
        self.xid += 1
        self.landed.append(("changes", [T.watermark(self.lsn, 0, backfill_id, int(chunk),
                                                    kind, snapshot, xid=self.xid, rows=rows,
                                                    keys=keys)]))

    def backfill(self, backfill_id: str = "bf", truncates: bool = True) -> None:
        """A DBLog backfill in three chunks racing with changes, a transaction committed
        before a low watermark but invisible to the chunk's snapshot among them. At
        times the second chunk reads from the first key again, as after a crash that lost
        the cursor past the first: its keys overlap the first chunk's."""
        rng = self.rng
        reread = rng.random() < 0.3
        chunks = [(1, 5), (1 if reread else 5, 12), (12, 10 ** 6)]  # keys [lo, hi)
        cursor = None  # the key the next chunk reads after (None: from the first)
        for number, (lo, hi) in enumerate(chunks, start=1):
            for _ in range(rng.randint(0, 3)):
                self.random_change()
            invisible = self.last_txn if rng.random() < 0.5 else None
            self.watermark(str(number), "low", backfill_id=backfill_id)
            for _ in range(rng.randint(0, 2)):
                self.random_change()
            # The SELECT: the table now, except what the invisible transaction did.
            state = dict(self.rows)
            if invisible is not None:
                for key, value in invisible[1].items():
                    if value is None:
                        state.pop(key, None)
                    else:
                        state[key] = value
            read = [(k, v) for k, v in sorted(state.items()) if lo <= k < hi]
            after = None if reread and number == 2 else cursor
            last = str(read[-1][0]) if read else None
            keys = {"after": after and [after], "last": last and [last]}
            cursor = last or after
            rows = [T.chunk_row(backfill_id, number, i, id=k, name=v[0], doc=v[1])
                    for i, (k, v) in enumerate(read)]
            self.landed.append(("snapshots", rows))
            for _ in range(rng.randint(0, 2)):
                self.random_change()
            xmin = invisible[0] if invisible else self.xid + 1
            snapshot = {"xmin": EPOCH + xmin, "xmax": EPOCH + self.xid + 1,
                        "xip": [EPOCH + invisible[0]] if invisible else []}
            self.watermark(str(number), "high", snapshot, rows=len(rows),
                           backfill_id=backfill_id, keys=keys)
            if truncates and rng.random() < 0.15:
                self.truncate()

    def random_change(self) -> None:
        rng, keys = self.rng, sorted(self.rows)
        roll = rng.random()
        word = f"v{rng.randint(0, 99)}"
        if not keys or roll < 0.25:
            key, self.next_id = self.next_id, self.next_id + 1
            self._txn([("insert", key, (word, f"D{rng.randint(0, 99)}"))])
        elif roll < 0.35:
            self._txn([("delete", rng.choice(keys))])
        elif roll < 0.45:  # a key change sends every column (see docs/silver.md, limits)
            key, self.next_id = self.next_id, self.next_id + 1
            self._txn([("update", rng.choice(keys), word, f"D{rng.randint(0, 99)}", False,
                        key)])
        elif roll < 0.55 and len(keys) > 1:  # two changes in one transaction
            a, b = rng.sample(keys, 2)
            self._txn([("update", a, word, None, True, None), ("delete", b)])
        else:
            toast = rng.random() < 0.6
            self._txn([("update", rng.choice(keys), word, f"D{rng.randint(0, 99)}", toast,
                        None)])


def generate(seed: int) -> tuple[History, dict[int, tuple[str, str]]]:
    rng = random.Random(seed)
    h = History(rng)
    for key in range(1, 9):  # rows older than the slot: in no bronze change
        h.rows[key] = (f"old{key}", f"P{key}")
    h.next_id = 20
    for _ in range(rng.randint(2, 5)):
        h.random_change()
    h.backfill()
    for _ in range(rng.randint(3, 8)):
        h.random_change()
    h.watermark("9", "low")  # a chunk that never completes
    return h, dict(h.rows)


def land(lake: BronzeLake, landings) -> None:
    changes = [r for kind, rows in landings if kind == "changes" for r in rows]
    snapshots = [r for kind, rows in landings if kind == "snapshots" for r in rows]
    lake.append_snapshots(snapshots)  # a chunk's rows land before its high watermark
    lake.append_changes(changes)


def generate_failover(seed: int) -> tuple[History, dict[int, tuple[str, str]], int]:
    """A history with a failover in the middle: the primary dies after transactions its
    standby never received; the promoted standby (same xids again, so they collide with
    the lost ones) takes writes in a new slot generation, and a resync follows.
    Returns the history, the new primary's final table and the generation's start."""
    rng = random.Random(seed)
    h = History(rng)
    for key in range(1, 9):
        h.rows[key] = (f"old{key}", f"P{key}")
    h.next_id = 20
    h.backfill(truncates=False)
    standby = (dict(h.rows), h.xid, h.next_id)  # what the standby had received
    for _ in range(rng.randint(3, 8)):  # on the primary only: bronze keeps them
        h.random_change()
    h.rows, h.xid, next_id = dict(standby[0]), standby[1], standby[2]
    h.next_id = next_id + 1000  # keys the lost transactions inserted may come back too
    start = h.lsn + 1  # lake LSNs of the new generation sort after all of bronze
    for _ in range(rng.randint(1, 4)):
        h.random_change()
    h.backfill("rs", truncates=False)
    h.watermark("-1", "resync", backfill_id="rs")
    for _ in range(rng.randint(0, 3)):
        h.random_change()
    return h, dict(h.rows), start
