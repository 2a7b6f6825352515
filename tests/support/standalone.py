"""A Spark standalone cluster on loopback: a master and workers, each in its own JVM, from
PySpark's own distribution (bin/spark-class), each worker with its own work directory."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from pipelines.embedded_pg import free_port

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


@dataclass
class StandaloneCluster:
    """Start with `start()`, stop with `stop()`; `url` is the master's spark:// address."""

    base: Path
    workers: int = 2
    worker_memory: str = "1g"
    port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def worker_dir(self, n: int) -> Path:
        return self.base / f"worker-{n}"

    def start(self, timeout: float = 120) -> "StandaloneCluster":
        self._launch("master", MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                     "--webui-port", str(free_port()))
        self._wait_for("master", "I have been elected leader", timeout)
        for n in range(self.workers):
            self.worker_dir(n).mkdir(parents=True)
            self._launch(f"worker-{n}", WORKER, "--host", "127.0.0.1", "--cores", "1",
                         "--memory", self.worker_memory, "--work-dir", str(self.worker_dir(n)),
                         "--webui-port", str(free_port()), self.url)
        for n in range(self.workers):
            self._wait_for(f"worker-{n}", "Successfully registered with master", timeout)
        return self

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

    def log(self, name: str) -> str:
        path = self.base / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def executor_logs(self, n: int) -> list[str]:
        """What the executors this worker ran wrote to stderr (app-*/<executor>/stderr)."""
        return [p.read_text(errors="replace") for p in self.worker_dir(n).glob("app-*/*/stderr")]

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        home = os.path.dirname(pyspark.__file__)  # a pip-installed PySpark is its SPARK_HOME
        env = {**os.environ, "SPARK_HOME": home, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_NO_DAEMONIZE": "1"}
        with (self.base / f"{name}.log").open("w") as out:
            self.processes.append(subprocess.Popen(
                [os.path.join(home, "bin", "spark-class"), main_class, *args],
                stdout=out, stderr=subprocess.STDOUT, env=env))

    def _wait_for(self, name: str, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log(name):
                return
            if any(p.poll() is not None for p in self.processes):
                break
            time.sleep(0.3)
        raise RuntimeError(f"spark {name} did not start: {self.log(name)[-2000:]}")
