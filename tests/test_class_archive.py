"""The classic driver starts from the class archive `make spark-jars` builds
(pipelines.class_archive): the options that ask for it, and a check by the JVM itself
that the archive fits the driver's JVM and class path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipelines import class_archive
from pipelines.class_archive import (JAVA_OPTIONS, QUIET, driver_java_options,
                                     with_class_archive)


@pytest.fixture
def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(class_archive, "ARCHIVE", path)
    return path


def test_no_archive_leaves_the_driver_options_alone(archive):
    assert driver_java_options() is None
    assert with_class_archive({JAVA_OPTIONS: "-Xss4m"}) == {JAVA_OPTIONS: "-Xss4m"}


def test_an_archive_is_added_to_the_driver_options_a_config_gives(archive):
    archive.write_bytes(b"an archive")
    wanted = f"-XX:SharedArchiveFile={archive} {QUIET}"
    assert driver_java_options() == wanted
    assert with_class_archive({}) == {JAVA_OPTIONS: wanted}
    assert with_class_archive({JAVA_OPTIONS: "-Xss4m", "spark.x": "1"}) == {
        JAVA_OPTIONS: f"-Xss4m {wanted}", "spark.x": "1"}
    # a config's own archive, or the training run's, is left as it is
    for own in ("-XX:SharedArchiveFile=/elsewhere.jsa", "-XX:ArchiveClassesAtExit=/new.jsa"):
        assert with_class_archive({JAVA_OPTIONS: own}) == {JAVA_OPTIONS: own}


@pytest.mark.spark
def test_the_built_archive_fits_the_classic_driver(engine, spark):
    """-Xshare:on makes a JVM fail where it cannot map its archive; given the driver's
    own class path, the archive must map (after a JDK or jar upgrade: rebuild it)."""
    if engine != "spark":
        pytest.skip("Sail has no JVM; the Spark pass runs this")
    assert class_archive.ARCHIVE.is_file(), "make spark-jars builds the archive"
    jvm = spark._jvm  # noqa: SLF001
    options = [str(o) for o in jvm.java.lang.management.ManagementFactory
               .getRuntimeMXBean().getInputArguments()]
    assert f"-XX:SharedArchiveFile={class_archive.ARCHIVE}" in options
    java = Path(jvm.java.lang.System.getProperty("java.home")) / "bin" / "java"
    check = subprocess.run(
        [str(java), "-Xshare:on", f"-XX:SharedArchiveFile={class_archive.ARCHIVE}",
         "-cp", jvm.java.lang.System.getProperty("java.class.path"), "-version"],
        capture_output=True, text=True, timeout=60, env={})
    assert check.returncode == 0, check.stdout + check.stderr
