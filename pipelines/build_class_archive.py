"""Build the class archive a classic Spark driver starts from (pipelines.class_archive):
a training run of the `spark` engine's session, in small, whose driver JVM records the
classes it loaded as it exits.

    python -m pipelines.build_class_archive

(`make spark-jars` runs it after the jars are fetched.) Run it again after a JDK or jar
upgrade: the JVM skips a stale archive.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pipelines.class_archive import ARCHIVE, JAVA_OPTIONS, QUIET

TRAINING_ROWS = 2_000


def build(archive: Path = ARCHIVE) -> Path:
    """Record the archive from a training run in a child process (the archive is written
    as its JVM exits); written beside `archive` first, so a driver starting meanwhile
    reads the old one or none, never half of one."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    for old in (archive, *archive.parent.glob(f"{archive.stem}.*.partial")):
        old.unlink(missing_ok=True)  # the training JVM starts without an archive
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    subprocess.run([sys.executable, "-m", "pipelines.build_class_archive", "--train",
                    str(partial)], check=True)
    if not partial.is_file():
        raise RuntimeError(f"the training JVM wrote no class archive at {partial}")
    partial.replace(archive)
    return archive


def train(partial: Path) -> None:
    """What a pipeline run does on classic Spark, in small: Delta tables with deletion
    vectors written, merged, read by version and aggregated; Parquet staged; the log
    read. Its driver JVM writes the archive to `partial` as it exits."""
    from pipelines import storage
    from pipelines.engine import start_classic_session

    with tempfile.TemporaryDirectory() as work:
        spark = start_classic_session(Path(work), "local[2]",
                                      packages=storage.spark_packages("s3"), conf={
                                          JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={partial} "
                                                        f"{QUIET}"})
        table, staged = f"delta.`{work}/table`", f"{work}/staged"
        rows = spark.range(TRAINING_ROWS).selectExpr(
            "id", "cast(id AS string) AS name", "cast(id / 7 AS decimal(12, 2)) AS amount",
            "current_timestamp() AS at")
        rows.write.format("delta").option("delta.enableDeletionVectors", "true").save(
            f"{work}/table")
        rows.filter("id % 3 = 0").selectExpr("id", "concat(name, 'x') AS name", "amount",
                                            "at").write.parquet(staged)
        spark.sql(f"""MERGE INTO {table} t USING parquet.`{staged}` s
            ON t.id = s.id AND t.id BETWEEN 0 AND {TRAINING_ROWS}
            WHEN MATCHED AND s.id % 2 = 0 THEN DELETE
            WHEN MATCHED THEN UPDATE SET *
            WHEN NOT MATCHED THEN INSERT *""")
        spark.sql(f"SELECT name, count(*), max(amount), row_number() OVER (ORDER BY name) "
                  f"FROM {table} VERSION AS OF 0 GROUP BY name").collect()
        spark.sql(f"DESCRIBE HISTORY {table}").collect()
        spark.sql(f"DELETE FROM {table} WHERE id < 10")
        spark.read.format("delta").load(f"{work}/table").count()
        spark.stop()
        _exit_jvm()


def _exit_jvm() -> None:
    """End the driver JVM and wait while it writes the archive (seconds): it exits when
    its stdin closes, which otherwise happens only as this process exits."""
    from pyspark import SparkContext

    jvm = SparkContext._gateway.proc  # noqa: SLF001  spark-submit execs the JVM: its process
    jvm.stdin.close()
    jvm.wait(timeout=300)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        train(args.train)
        return
    path = build()
    print(f"classic Spark's class archive: {path} ({path.stat().st_size / 1e6:.0f} MB)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
