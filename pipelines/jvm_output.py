"""Classic Spark's JVM output as the pipeline's log records, under the logger `spark`.

PySpark starts the driver's JVM through spark-submit, which would write straight to this
process's terminal: Ivy's resolution report, the JVM's own notices and log4j's lines.
Here the JVM writes into a pipe instead. A daemon thread reads it for the JVM's whole
life (a full pipe would block the JVM) and logs each line at DEBUG, so that `-v` shows
them, except what reports an error: a log4j ERROR or FATAL line with the exception
under it (its stack frames stay at DEBUG), and an uncaught exception of a JVM thread.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import deque
from typing import Mapping

log = logging.getLogger("spark")

# A log4j line in the CLI's layout (pipelines/log4j2-quiet.properties: `LEVEL logger:
# message`) or in Spark's default one (`yy/MM/dd HH:mm:ss LEVEL logger: message`).
LOG4J_LINE = re.compile(r"(?:\d\d/\d\d/\d\d \d\d:\d\d:\d\d )?"
                        r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL)\s+\S+: ")
ERROR_LEVELS = ("ERROR", "FATAL")
STACK_FRAME = re.compile(r"\s+(at |\.\.\. \d+ more)")
UNCAUGHT = "Exception in thread "  # the JVM's default handler, outside log4j
START_LINES = 60  # what a failed start shows of the output -v would have shown


def start_spark_context(options: Mapping[str, str]) -> None:
    """Start the SparkContext of a builder's `options` with its JVM's output logged (see
    the module's docstring). When the JVM exits before PySpark connects to it (Ivy cannot
    resolve a package, no Java), the lines of its start that the log level hides are
    logged at WARNING: they hold the cause. A process whose PySpark has a JVM already
    (a stopped session's) keeps it, as the builder would: nothing happens here."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # noqa: SLF001
        return
    conf = SparkConf(loadDefaults=False).setAll(options.items())
    output = JvmOutput()
    try:
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stdout": output.writer,
                                                         "stderr": output.writer})
        finally:
            os.close(output.writer)  # the JVM holds its own copy: the pipe ends when it exits
    except Exception:
        output.log_failed_start()
        raise
    output.started()
    SparkContext(conf=conf, gateway=gateway)


class JvmOutput:
    """A pipe for the JVM's stdout and stderr (`writer`) and the thread that logs it."""

    def __init__(self) -> None:
        reader, self.writer = os.pipe()
        self._level = logging.DEBUG  # the level of the record a line belongs to
        self._lock = threading.Lock()
        self._start: deque[str] | None = deque(maxlen=START_LINES)  # hidden lines
        self._thread = threading.Thread(target=self._drain, args=(reader,), daemon=True,
                                        name="spark-jvm-output")
        self._thread.start()

    def _drain(self, reader: int) -> None:
        with open(reader, "rb") as stream:
            for raw in stream:
                self._log(raw.decode(errors="replace").rstrip())

    def _log(self, line: str) -> None:
        if not line:
            return
        level, message = self._record(line)
        if log.isEnabledFor(level):
            log.log(level, "%s", message)
            return
        with self._lock:
            if self._start is not None:
                self._start.append(message)

    def _record(self, line: str) -> tuple[int, str]:
        """The level of `line` and its message (without log4j's time: a record has its
        own). A line outside log4j's layout belongs to the record above it."""
        record = LOG4J_LINE.match(line)
        if record:
            self._level = logging.ERROR if record["level"] in ERROR_LEVELS else logging.DEBUG
            return self._level, line[record.start("level"):]
        if line.startswith(UNCAUGHT):
            self._level = logging.ERROR
        elif STACK_FRAME.match(line):
            return logging.DEBUG, line
        return self._level, line

    def started(self) -> None:
        """PySpark reached the JVM: its start's lines are not kept any longer."""
        with self._lock:
            self._start = None

    def log_failed_start(self) -> None:
        """After a failed start: the hidden lines of the JVM's output, once it has ended
        (the JVM exited, or gives up its pipe within seconds)."""
        self._thread.join(timeout=10)
        with self._lock:
            lines, self._start = list(self._start or ()), None
        if lines:
            log.warning("the Spark JVM's output as it started:\n%s", "\n".join(lines))
