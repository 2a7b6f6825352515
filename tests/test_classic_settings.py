"""The settings every classic session starts with (pipelines.engine.CLASSIC_CONF), which
docs/silver.md lists with their reasons."""

from __future__ import annotations

import pytest

from pipelines.class_archive import JAVA_OPTIONS
from pipelines.engine import CLASSIC_CONF, HUGE_METHOD_BYTES, LOCAL_DRIVER_JIT, with_local_jit

pytestmark = pytest.mark.spark

LIMIT = "spark.sql.codegen.hugeMethodLimit"


def test_a_classic_session_falls_back_from_methods_the_jvm_would_not_compile(engine, spark):
    """Whole-stage code generation over a wide table's typing makes methods longer than
    HotSpot compiles; Spark falls back from those only under this limit."""
    if engine != "spark":
        pytest.skip("a classic session's setting: the Spark pass runs this")
    assert CLASSIC_CONF[LIMIT] == str(HUGE_METHOD_BYTES) == "8000"
    assert spark.conf.get(LIMIT) == "8000"


def test_a_local_driver_compiles_with_c1_unless_its_options_choose():
    jit = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
    assert LOCAL_DRIVER_JIT == jit
    assert with_local_jit("local[2]", {}) == {JAVA_OPTIONS: jit}
    assert with_local_jit("local[*]", {JAVA_OPTIONS: "-Xss4m", "a": "b"}) == {
        JAVA_OPTIONS: f"-Xss4m {jit}", "a": "b"}
    # a cluster's driver does not run the tasks; options that choose a compiler win
    assert with_local_jit("spark://host:7077", {}) == {}
    for own in ("-XX:-TieredCompilation", "-XX:TieredStopAtLevel=4"):
        assert with_local_jit("local[2]", {JAVA_OPTIONS: own}) == {JAVA_OPTIONS: own}


def test_a_local_classic_session_was_started_with_c1(engine, spark):
    if engine != "spark":
        pytest.skip("a classic session's setting: the Spark pass runs this")
    assert LOCAL_DRIVER_JIT in spark.sparkContext.getConf().get(JAVA_OPTIONS)
