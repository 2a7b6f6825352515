"""Fixtures for the silver job tests: a lake under tmp_path and its config."""

from __future__ import annotations

from pathlib import Path

import pytest
from bronze_builder import BronzeLake, make_config

from pipelines.config import Config


@pytest.fixture
def lake(tmp_path: Path) -> BronzeLake:
    return BronzeLake(tmp_path / "lake")


@pytest.fixture
def config(lake: BronzeLake) -> Config:
    return make_config(lake.root)
