"""The class data sharing archive a classic Spark driver starts from: a JVM that starts
from it maps the classes a pipeline run loads (Spark's, Delta Lake's, Hadoop's) instead
of loading and verifying them one by one from their jars. A classic driver loads some
25,000 classes; on two cores that is a large part of a short run (`lakehouse silver` on
new bronze, a gold refresh).

The archive is the JDK's own feature (CDS, JEP 350), recorded by
pipelines.build_class_archive into a file beside this Python environment. The JVM
checks it against itself and the jars on every start: after a JDK or jar upgrade it
starts without it, silently, as it would with none; build it again then.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping

ARCHIVE = Path(sys.prefix) / "share" / "lakehouse" / "spark-classes.jsa"
# A stale archive (another JDK, changed jars) is skipped with a warning on stdout: only
# the pipeline's own lines belong in the terminal.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def driver_java_options(archive: Path | None = None) -> str | None:
    """The driver JVM's options that start it from `archive` (default: ARCHIVE); None
    when there is none."""
    archive = archive or ARCHIVE
    if not archive.is_file():
        return None
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def with_class_archive(conf: Mapping[str, str]) -> dict[str, str]:
    """A classic session's `conf` with its driver JVM started from the archive, where one
    is built and `conf` asks for no other (nor records one)."""
    options = conf.get(JAVA_OPTIONS, "")
    archive = driver_java_options()
    if archive is None or "SharedArchiveFile" in options or "ArchiveClassesAtExit" in options:
        return dict(conf)
    return {**conf, JAVA_OPTIONS: f"{options} {archive}".strip()}
