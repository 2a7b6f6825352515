"""Real object-store servers for the suite: MinIO (S3) and Azurite (Azure Blob).

Both are installed by `make test` (scripts/install-object-stores.sh, into the venv) and
started here on free loopback ports with their data in a temporary directory. Each test
gets its own bucket or container. Credentials reach the pipeline the way they do in
production: through the cloud SDKs' environment variables, never through the config.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from pipelines.embedded_pg import free_port

BIN = Path(sys.prefix) / "bin"
MINIO = Path(os.environ.get("LAKEHOUSE_TEST_MINIO", BIN / "minio"))
AZURITE = Path(os.environ.get("LAKEHOUSE_TEST_AZURITE",
                              Path(sys.prefix) / "azurite" / "node_modules" / ".bin" / "azurite-blob"))
INSTALL_HINT = "run `make test` (or scripts/install-object-stores.sh) to install it"
# Azurite's fixed development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


@dataclass
class StoreServer:
    """One running server: its process, and what a lake on it needs."""

    scheme: str
    process: subprocess.Popen
    env: dict[str, str]  # the credentials, as the SDK variables
    storage_options: dict[str, str]  # non-secret settings, delta-rs names
    filesystem: pafs.FileSystem  # for creating buckets/containers

    def new_lake(self, prefix: str = "lake") -> str:
        """A fresh bucket (container) and a lake URL in it."""
        bucket = f"t-{uuid.uuid4().hex[:20]}"
        self.filesystem.create_dir(bucket)
        return f"{self.scheme}://{bucket}/{prefix}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _wait(ready, what: str, process: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: "
                               f"{log.read_text()[-2000:]}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{what} did not start in {seconds:.0f} s: {log.read_text()[-2000:]}")


def start_minio(workdir: Path) -> StoreServer:
    if not MINIO.exists():
        raise RuntimeError(f"MinIO is not installed at {MINIO}: {INSTALL_HINT}")
    port, console = free_port(), free_port()
    user, password = "lakehouse", secrets.token_hex(16)
    log = workdir / "minio.log"
    process = subprocess.Popen(
        [str(MINIO), "server", str(workdir / "data"), "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{console}", "--quiet"],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "MINIO_ROOT_USER": user, "MINIO_ROOT_PASSWORD": password,
             "MINIO_BROWSER": "off", "MINIO_UPDATE": "off"})
    endpoint = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with urllib.request.urlopen(f"{endpoint}/minio/health/live", timeout=2) as reply:
            return reply.status == 200

    _wait(ready, "MinIO", process, log)
    filesystem = pafs.S3FileSystem(access_key=user, secret_key=password, scheme="http",
                                   endpoint_override=f"127.0.0.1:{port}", region="us-east-1",
                                   allow_bucket_creation=True)
    env = {"AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": password,
           "AWS_REGION": "us-east-1"}
    options = {"aws_endpoint_url": endpoint, "aws_allow_http": "true"}
    return StoreServer("s3", process, env, options, filesystem)


def start_azurite(workdir: Path) -> StoreServer:
    if not AZURITE.exists():
        raise RuntimeError(f"Azurite is not installed at {AZURITE}: {INSTALL_HINT}")
    port = free_port()
    log = workdir / "azurite.log"
    process = subprocess.Popen(
        [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(workdir / "data"), "--skipApiVersionCheck", "--loose", "--silent"],
        stdout=log.open("w"), stderr=subprocess.STDOUT)

    def ready() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True

    _wait(ready, "Azurite", process, log)
    authority = f"127.0.0.1:{port}"
    filesystem = pafs.AzureFileSystem(
        account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY, blob_storage_authority=authority,
        dfs_storage_authority=authority, blob_storage_scheme="http", dfs_storage_scheme="http")
    # Emulator mode: object_store (delta-rs, Sail, obstore) then lists the way Azurite
    # understands (with an explicit endpoint it lists from an offset, which Azurite
    # mishandles: appends after the first fail), at AZURITE_BLOB_STORAGE_URL.
    env = {"AZURE_STORAGE_ACCOUNT_NAME": AZURITE_ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": AZURITE_KEY,
           "AZURITE_BLOB_STORAGE_URL": f"http://{authority}"}
    options = {"azure_storage_use_emulator": "true"}
    return StoreServer("az", process, env, options, filesystem)
