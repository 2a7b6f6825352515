"""Fixtures for the silver job tests: a lake under tmp_path and its config."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, ContextManager

import pytest

from pipelines.config import Config
from pipelines.silver import job
from tests.support.bronze_builder import BronzeLake
from tests.support.config import make_config


@pytest.fixture
def lake(tmp_path: Path) -> BronzeLake:
    return BronzeLake(tmp_path / "lake")


@pytest.fixture
def config(lake: BronzeLake, layout: dict[str, Any]) -> Config:
    """A config for the lake; silver tables at its paths unless the test's layout places
    them by catalog names."""
    return make_config(lake=lake.root, **layout)


@pytest.fixture
def crash_before_progress(monkeypatch) -> Callable[[], ContextManager[None]]:
    """`with crash_before_progress(): run_silver(...)`: the run dies after its MERGE
    statements, just before it records its progress (a kill at the worst moment)."""
    @contextmanager
    def crashing():
        def crash(*args, **kwargs):
            raise RuntimeError("killed before the progress commit")

        with monkeypatch.context() as patch:
            patch.setattr(job, "write_progress", crash)
            with pytest.raises(RuntimeError, match="killed before the progress commit"):
                yield
    return crashing
