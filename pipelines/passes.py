"""Loops that apply silver and gold every few seconds survive a pass that fails.

A pass can fail for a moment without anything being wrong with the data: a Delta log
file deleted by a checkpoint's cleanup between listing and reading it, a file system
hiccup. Silver is idempotent (progress is written after the MERGE statements), so the
next pass simply applies the same bronze again. Errors the pipeline itself raises
(configuration, source, data) are not transient and end the loop at once, and so does a
pass that keeps failing.
"""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

from pipelines.errors import LakehouseError
from pipelines.metrics import count_error

log = logging.getLogger(__name__)

MAX_FAILED_PASSES = 5  # in a row: then the error is raised
T = TypeVar("T")


class FailedPasses:
    """Runs one pass of a loop; a failure is logged and retried by the next pass."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.in_a_row = 0

    def run(self, one_pass: Callable[[], T]) -> T | None:
        """The pass's result, or None if it failed and the loop should go on."""
        try:
            result = one_pass()
        except LakehouseError:
            raise
        except Exception:
            count_error("unexpected")
            self.in_a_row += 1
            if self.in_a_row >= MAX_FAILED_PASSES:
                raise
            log.warning("%s failed (%d in a row; the loop stops at %d); trying again next "
                        "pass", self.what, self.in_a_row, MAX_FAILED_PASSES, exc_info=True)
            return None
        self.in_a_row = 0
        return result
