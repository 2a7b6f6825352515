"""An embedded PostgreSQL 16 server (binaries from the `pgserver` wheel).

Used by `lakehouse demo`, the test suite and the benchmarks so that nothing but
Python is assumed on the machine. Postgres refuses to run as root, so under root
the server runs as an unprivileged system user created on first use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import pwd
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipelines.errors import SourceError

log = logging.getLogger(__name__)

SERVER_USER = "lakehouse-pg"
SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "40",
    "max_wal_senders": "40",
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "on",
    "shared_buffers": "256MB",
    "max_wal_size": "4GB",
    "logging_collector": "off",
    "log_min_messages": "warning",
}


def bin_dir() -> Path:
    """Directory holding the bundled Postgres binaries (initdb, pg_ctl, pg_recvlogical)."""
    spec = importlib.util.find_spec("pgserver")  # not imported: its import has side effects
    if spec is None or not spec.submodule_search_locations:
        raise SourceError("the pgserver package is not installed (pip install pgserver)")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def free_port() -> int:
    """A TCP port on loopback that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A server's data directory and port; start/stop are idempotent."""

    data_dir: Path
    port: int
    user: str = "postgres"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={dbname}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def start(self, extra_settings: dict[str, str] | None = None) -> "EmbeddedPostgres":
        """Initialise the data directory if new, then start the server and wait for it."""
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_settings({**SETTINGS, "port": str(self.port), **(extra_settings or {})})
        if self.is_running():
            return self
        result = self._run(["pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_dir),
                            "-l", str(self.log_file)], check=False)
        if result.returncode != 0:
            tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise SourceError(f"embedded Postgres did not start on port {self.port}:\n"
                              f"{result.stderr}{tail}")
        log.info("embedded Postgres running: %s (data in %s)", self.dsn(), self.data_dir)
        return self

    def stop(self) -> None:
        if self.is_running():
            self._run(["pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data_dir)])

    def is_running(self) -> bool:
        if not (self.data_dir / "postmaster.pid").exists():
            return False
        return self._run(["pg_ctl", "status", "-D", str(self.data_dir)],
                         check=False).returncode == 0

    def _initdb(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        if os.geteuid() == 0:
            account = _server_account()
            os.chown(self.data_dir, account.pw_uid, account.pw_gid)
        self._run(["initdb", "-D", str(self.data_dir), "-U", self.user, "--auth=trust",
                   "-E", "UTF8", "--locale=C", "--no-instructions"])

    def _write_settings(self, settings: dict[str, str]) -> None:
        conf = self.data_dir / "postgresql.auto.conf"
        conf.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
        if os.geteuid() == 0:
            account = _server_account()
            os.chown(conf, account.pw_uid, account.pw_gid)

    def _run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(bin_dir() / argv[0]), *argv[1:]]
        kwargs = {}
        if os.geteuid() == 0:
            account = _server_account()
            kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        result = subprocess.run(argv, capture_output=True, text=True, cwd="/", **kwargs)
        if check and result.returncode != 0:
            raise SourceError(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")
        return result


def server_dir_for(path: Path) -> Path:
    """Where the server's data can live: `path`, unless root's server user can't reach it.

    Under root the server runs as an unprivileged user, which cannot enter directories
    such as /root; then the data goes under /var/tmp, keyed by the requested path.
    """
    path = path.resolve()
    if os.geteuid() != 0 or _traversable_by_others(path.parent):
        return path
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    return Path("/var/tmp/lakehouse-pg") / digest


def _traversable_by_others(path: Path) -> bool:
    for part in [path, *path.parents]:
        if part.exists() and not part.stat().st_mode & stat.S_IXOTH:
            return False
    return True


def _server_account() -> pwd.struct_passwd:
    """The unprivileged account the server runs as under root, created if missing."""
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        subprocess.run([useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        SERVER_USER], check=True, capture_output=True)
        return pwd.getpwnam(SERVER_USER)
