"""Spark Connect servers on loopback for `engine: connect`: Spark's own, from PySpark's
distribution with delta-spark on its classpath (as `sbin/start-connect-server.sh` starts
it), and a standalone Sail server (`sail spark server`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.embedded_pg import free_port
from pipelines.engine import CLASSIC_CONF, CONNECT_VARIABLES
from tests.support.engines import CLASSIC_TEST_CONF

CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        # localhost, not 127.0.0.1: PySpark sends a token without TLS only to localhost
        return f"sc://localhost:{self.port}"

    def wait(self, timeout: float = 180) -> "ConnectServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"Connect server exited:\n{self.log.read_text()[-4000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"Connect server not listening:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def delta_package() -> str:
    """The delta-spark Maven coordinate the pipeline's own classic sessions use, as
    configure_spark_with_delta_pip names it for the installed delta-spark and PySpark."""
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    return configure_spark_with_delta_pip(SparkSession.Builder())._options[  # noqa: SLF001
        "spark.jars.packages"]


def start_spark_connect(workdir: Path, token: str) -> ConnectServer:
    """Spark's Connect server in local[2] mode with Delta Lake, which only a client that
    presents `token` may use."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)  # a pip-installed PySpark is its SPARK_HOME
    port = free_port()
    # The settings of the pipeline's own classic sessions (Delta's extension and catalog)
    conf = {**CLASSIC_CONF, **CLASSIC_TEST_CONF, "spark.connect.grpc.binding.port": str(port),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.authenticate.token": token,
            "spark.sql.warehouse.dir": str(workdir / "warehouse")}
    command = [os.path.join(home, "bin", "spark-submit"), "--class", CONNECT_SERVER,
               "--master", "local[2]", "--packages", delta_package()]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    log = workdir / "spark-connect.log"
    env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable}
    for variable in CONNECT_VARIABLES:
        env.pop(variable, None)
    with log.open("w") as out:
        process = subprocess.Popen([*command, "spark-internal"], stdout=out,
                                   stderr=subprocess.STDOUT, env=env, cwd=workdir)
    return ConnectServer(process, port, log).wait()


def start_sail(workdir: Path) -> ConnectServer:
    """A standalone Sail server: the `sail` command of the pysail package."""
    port = free_port()
    log = workdir / "sail.log"
    sail = Path(sys.executable).parent / "sail"
    with log.open("w") as out:
        process = subprocess.Popen([str(sail), "spark", "server", "--ip", "127.0.0.1",
                                    "--port", str(port), "-C", str(workdir)],
                                   stdout=out, stderr=subprocess.STDOUT)
    return ConnectServer(process, port, log).wait()
