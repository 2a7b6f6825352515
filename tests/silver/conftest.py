"""Fixtures for the silver job tests: a lake under tmp_path and its config (Sail only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bronze_builder import BronzeLake, make_config

from pipelines.config import Config


@pytest.fixture
def sail(spark, engine):
    """The Sail session: these tests write Delta tables (classic PySpark here has no
    Delta jars), so they run in the default `--engine sail` pass only."""
    if engine != "sail":
        pytest.fail("silver job tests write Delta: run them with --engine sail (the default)")
    return spark


@pytest.fixture
def lake(tmp_path: Path) -> BronzeLake:
    return BronzeLake(tmp_path / "lake")


@pytest.fixture
def config(lake: BronzeLake) -> Config:
    return make_config(lake.root)
