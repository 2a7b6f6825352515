"""A classic driver's MERGE modes (pipelines/silver/merge_modes.py): statements of one mode
run at once with the session's setting theirs; one of the other mode waits for them; the
setting is unset once no statement runs."""

from __future__ import annotations

import threading

from pipelines.silver.merge_modes import PERSISTENT_DELETION_VECTORS, MergeModes


class RecordedConf:
    """A session's settings, as a dict."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


def test_merges_of_one_mode_run_together_and_the_other_mode_waits():
    conf = RecordedConf()
    modes = MergeModes(conf)
    inside = threading.Semaphore(0)
    release = threading.Event()
    seen: dict[str, str | None] = {}

    def rewrite(name: str) -> None:
        with modes.writing(deletion_vectors=False):
            seen[name] = conf.values.get(PERSISTENT_DELETION_VECTORS)
            inside.release()
            assert release.wait(10)

    def mark() -> None:
        with modes.writing(deletion_vectors=True):
            seen["mark"] = conf.values.get(PERSISTENT_DELETION_VECTORS)

    rewriting = [threading.Thread(target=rewrite, args=(f"r{i}",)) for i in range(3)]
    for thread in rewriting:
        thread.start()
    assert all(inside.acquire(timeout=10) for _ in rewriting)  # all three at once
    marking = threading.Thread(target=mark)
    marking.start()
    marking.join(0.2)
    assert marking.is_alive() and "mark" not in seen  # it waits for the rewrites
    release.set()
    for thread in [*rewriting, marking]:
        thread.join(10)
    assert seen == {"r0": "false", "r1": "false", "r2": "false", "mark": "true"}
    assert PERSISTENT_DELETION_VECTORS not in conf.values  # unset once none runs
