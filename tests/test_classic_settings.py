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


def test_a_classic_session_writes_local_files_without_hadoop_s_checksum_files(engine, spark,
                                                                              tmp_path):
    """Hadoop's checksummed local file system writes `.name.crc` beside each file and
    renames it with a commit (each a `readlink` or `chmod` process without its native
    library); the raw one writes only the lake's own files, as Sail and delta-rs do."""
    if engine != "spark":
        pytest.skip("a classic session's setting: the Spark pass runs this")
    table = tmp_path / "table"
    spark.range(3).write.format("delta").save(str(table))
    spark.range(3, 5).write.format("delta").mode("append").save(str(table))
    assert spark.read.format("delta").load(str(table)).count() == 5
    names = [p.name for p in table.rglob("*") if p.is_file()]
    assert [n for n in names if n.startswith(".") and n.endswith(".crc")] == []
    assert len([n for n in names if n.endswith(".parquet")]) >= 2
    assert sorted(n for n in names if n.endswith(".json")) == [
        f"{v:020d}.json" for v in (0, 1)]
