"""How a classic driver's MERGE writes a table: by rewriting the files it touches
(copy-on-write) or by marking the rows it replaces in deletion vectors.

delta-spark reads the choice from a session-wide setting while a MERGE runs, and a run's
tables merge at once, in threads of their own (silver.parallel_tables): the statements
that want the setting one way run together, and the others wait until they are done.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, Protocol

PERSISTENT_DELETION_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"


class SessionConf(Protocol):
    """The part of a session's RuntimeConfig the modes use."""

    def set(self, key: str, value: str) -> None: ...

    def unset(self, key: str) -> None: ...


class MergeModes:
    """Gives each MERGE the mode it asks for; the session's setting is unset again once
    no MERGE runs, so statements outside the pipeline's get delta-spark's default."""

    def __init__(self, conf: SessionConf) -> None:
        self._conf = conf
        self._turn = threading.Condition()
        self._mode: bool | None = None  # deletion vectors, while `_running` > 0
        self._running = 0

    @contextmanager
    def writing(self, deletion_vectors: bool) -> Iterator[None]:
        """Run the block's MERGE with deletion vectors, or rewriting the files it touches."""
        with self._turn:
            self._turn.wait_for(lambda: self._running == 0 or self._mode == deletion_vectors)
            if self._running == 0:
                self._conf.set(PERSISTENT_DELETION_VECTORS, str(deletion_vectors).lower())
                self._mode = deletion_vectors
            self._running += 1
        try:
            yield
        finally:
            with self._turn:
                self._running -= 1
                if self._running == 0:
                    self._conf.unset(PERSISTENT_DELETION_VECTORS)
                    self._mode = None
                self._turn.notify_all()
