"""Fixtures for backfill tests: a lake under tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"
