"""The settings every classic session starts with (pipelines.engine.CLASSIC_CONF), which
docs/silver.md lists with their reasons."""

from __future__ import annotations

import pytest

from pipelines.engine import CLASSIC_CONF, HUGE_METHOD_BYTES

pytestmark = pytest.mark.spark

LIMIT = "spark.sql.codegen.hugeMethodLimit"


def test_a_classic_session_falls_back_from_methods_the_jvm_would_not_compile(engine, spark):
    """Whole-stage code generation over a wide table's typing makes methods longer than
    HotSpot compiles; Spark falls back from those only under this limit."""
    if engine != "spark":
        pytest.skip("a classic session's setting: the Spark pass runs this")
    assert CLASSIC_CONF[LIMIT] == str(HUGE_METHOD_BYTES) == "8000"
    assert spark.conf.get(LIMIT) == "8000"
