"""Fetch classic Spark's Delta Lake and S3 connector jars once, so that no test run or
demo downloads them.

Starts the `spark` engine's session exactly as the pipeline does
(pipelines.engine.start_classic_session): Spark's Ivy resolves the delta-spark release
that matches the installed delta-spark package, and hadoop-aws for a lake on S3, from
Maven Central into its cache (~/.ivy2.5.2), where every later session finds them.
"""

import sys
import tempfile
from pathlib import Path

from pipelines import storage
from pipelines.engine import start_classic_session

with tempfile.TemporaryDirectory() as warehouse:
    spark = start_classic_session(Path(warehouse), "local[1]",
                                  packages=storage.spark_packages("s3"))
    print(f"Spark {spark.version} with Delta Lake and the S3 connector: jars cached",
          file=sys.stderr)
    spark.stop()
