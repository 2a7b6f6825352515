"""Fetch classic Spark's Delta Lake jars once, so that no test run or demo downloads them.

Starts the `spark` engine's session exactly as the pipeline does
(pipelines.engine.start_classic_session): Spark's Ivy resolves the delta-spark release
that matches the installed delta-spark package from Maven Central into its cache
(~/.ivy2.5.2), where every later session finds it.
"""

import sys
import tempfile
from pathlib import Path

from pipelines.engine import start_classic_session

with tempfile.TemporaryDirectory() as warehouse:
    spark = start_classic_session(Path(warehouse), "local[1]")
    print(f"Spark {spark.version} with Delta Lake: jars cached", file=sys.stderr)
    spark.stop()
