"""A classic Spark start prints only the pipeline's own lines: the JVM's output (Ivy's
resolution report, log4j's warnings and notices) is debug records of the logger `spark`,
which -v shows; the JVM's errors stay errors."""

from __future__ import annotations

import logging
import os
import re

import pytest

from pipelines.jvm_output import JvmOutput
from tests.support.bronze_builder import BronzeLake, Table
from tests.support.cli import lakehouse
from tests.support.config import write_config

# What a terminal never shows without -v, and the plain format of a log record.
IVY_LINES = (":: resolving dependencies ::", "artifacts copied", ":: retrieving ::")
RECORD = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) +\S+: ")

# What a JVM prints: its own notice, Ivy's report, log4j lines in Spark's default layout
# and in the CLI's, an error with its exception, and an uncaught exception.
JVM_OUTPUT = [
    (logging.DEBUG, "WARNING: Using incubator modules: jdk.incubator.vector"),
    (logging.DEBUG, ":: resolving dependencies :: org.apache.spark#spark-submit-parent;1.0"),
    (logging.DEBUG, "\tconfs: [default]"),
    (logging.DEBUG, "WARN NativeCodeLoader: Unable to load native-hadoop library"),
    (logging.ERROR, "ERROR org.apache.spark.executor.Executor: Exception in task 0.0"),
    (logging.ERROR, "org.apache.spark.SparkRuntimeException: [USER_RAISED_EXCEPTION] boom"),
    (logging.DEBUG, "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.raiseError"),
    (logging.ERROR, "Caused by: java.io.IOException: no space left on device"),
    (logging.DEBUG, "\t... 12 more"),
    (logging.DEBUG, "INFO org.apache.spark.SparkContext: Successfully stopped SparkContext"),
    (logging.ERROR, 'Exception in thread "main" java.lang.RuntimeException: [unresolved'),
]


def jvm_prints(output: JvmOutput) -> None:
    """JVM_OUTPUT through the pipe, the NativeCodeLoader line with Spark's default time."""
    lines = [("25/01/05 18:22:36 " if "NativeCodeLoader" in line else "") + line
             for _, line in JVM_OUTPUT]
    os.write(output.writer, "\n".join(lines).encode() + b"\n")
    os.close(output.writer)


def test_the_jvms_lines_are_debug_records_and_its_errors_stay_errors(caplog):
    caplog.set_level(logging.DEBUG, logger="spark")
    output = JvmOutput()
    jvm_prints(output)
    output.log_failed_start()  # waits for the pipe's end; -v showed every line already

    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == \
        [("spark", level, line) for level, line in JVM_OUTPUT]


def test_a_failed_start_shows_the_lines_the_level_hid(caplog):
    caplog.set_level(logging.INFO)
    output = JvmOutput()
    jvm_prints(output)
    output.log_failed_start()

    errors = [line for level, line in JVM_OUTPUT if level == logging.ERROR]
    hidden = [line for level, line in JVM_OUTPUT if level == logging.DEBUG]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        *[(logging.ERROR, line) for line in errors],
        (logging.WARNING, "\n".join(["the Spark JVM's output as it started:", *hidden]))]


@pytest.mark.classic
def test_a_spark_start_prints_only_the_pipelines_lines_unless_verbose(tmp_path):
    lake = BronzeLake(tmp_path / "lake")
    items = Table()
    lake.append_changes([items.insert(10, 0, id=1, name="a"), items.insert(11, 0, id=2)])
    config = write_config(tmp_path / "lakehouse.yml", lake=lake.root, engine="spark",
                          spark={"master": "local[1]"})
    # Settings an in-process CLI test may have left in this environment.
    env = {k: v for k, v in os.environ.items()
           if k not in ("LAKEHOUSE_LOG_FORMAT", "SPARK_SUBMIT_OPTS")}

    quiet = lakehouse(config, "silver", env=env)

    assert "public.items" in quiet.stdout
    assert "spark engine: classic Spark" in quiet.stderr
    for line in quiet.stderr.splitlines():
        assert RECORD.match(line), f"not a log record of the pipeline: {line!r}"
    assert not [line for line in IVY_LINES if line in quiet.stderr + quiet.stdout]
    assert " WARN " not in quiet.stderr + quiet.stdout

    verbose = lakehouse(None, "-v", "--config", str(config), "sql", "SELECT 1 AS one",
                        env=env)

    jvm = [line[RECORD.match(line).end():] for line in verbose.stderr.splitlines()
           if re.match(r"\d\d:\d\d:\d\d DEBUG +spark: ", line)]
    for ivy in IVY_LINES:
        assert any(ivy in line for line in jvm), ivy
    assert "Using Spark's default log4j profile: org/apache/spark/log4j2-defaults.properties" \
        in jvm
