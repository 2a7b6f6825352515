"""The embedded engine keeps its session however long the process leaves it idle: Sail
removes a session idle for 15 minutes unless told otherwise, and the process that
started the server is its only client."""

from __future__ import annotations

import os
import subprocess
import sys

from pipelines.engine import LOCAL_IDLE_SECONDS, SAIL_IDLE_TIMEOUT

# Start the embedded engine, stay idle, then query: prints the idle timeout Sail was
# given and the query's outcome.
IDLE_THEN_QUERY = """
import os, sys, time
from pipelines.engine import SAIL_IDLE_TIMEOUT, start_local_session
spark = start_local_session(sys.argv[1])
spark.range(1).count()
time.sleep(float(sys.argv[2]))
try:
    outcome = spark.range(3).count()
except Exception as error:
    outcome = "expired" if "is not running" in str(error) else repr(error)
print(os.environ[SAIL_IDLE_TIMEOUT], outcome)
"""


def idle_then_query(tmp_path, idle_seconds: float, env: dict[str, str]) -> list[str]:
    command = [sys.executable, "-c", IDLE_THEN_QUERY, str(tmp_path), str(idle_seconds)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout.split()


def test_the_session_outlives_an_idle_pause_and_an_operator_may_still_set_the_timeout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != SAIL_IDLE_TIMEOUT}

    assert idle_then_query(tmp_path / "default", 3, env) == [str(LOCAL_IDLE_SECONDS), "3"]
    # the variable is the one Sail reads: a short timeout set by the operator holds
    assert idle_then_query(tmp_path / "short", 4, env | {SAIL_IDLE_TIMEOUT: "1"}) == \
        ["1", "expired"]
