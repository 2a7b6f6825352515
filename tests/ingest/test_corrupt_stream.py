"""A corrupt message from the server stops the ingest with exit 4 and confirms nothing
past the last durable transaction. The corruption is real bytes on a real connection:
a loopback proxy between the ingest and Postgres flips one pgoutput message type."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading

import psycopg
import pytest

from tests.support.cli import start_lakehouse
from tests.support.config import write_config
from tests.support.ingest import bronze, execute, ingest

pytestmark = [pytest.mark.postgres, pytest.mark.pg_versions]

XLOGDATA_HEADER = 1 + 8 + 8 + 8  # 'w', wal start, wal end, send time


class CorruptingProxy:
    """Forwards one Postgres connection; turns the first pgoutput Insert ('I') into 'Z'."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.corrupted = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            client, _ = self.listener.accept()
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(server, client),
                             daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            target.close()

    def _server_to_client(self, server: socket.socket, client: socket.socket) -> None:
        buffer = b""
        try:
            while data := server.recv(65536):
                buffer += data
                out = bytearray()
                while len(buffer) >= 5:  # every server message: type byte + int32 length
                    length = struct.unpack_from("!I", buffer, 1)[0]
                    if len(buffer) < 1 + length:
                        break
                    message = bytearray(buffer[:1 + length])
                    buffer = buffer[1 + length:]
                    payload = 5
                    if (message[0:1] == b"d" and message[payload:payload + 1] == b"w"
                            and message[payload + XLOGDATA_HEADER:][:1] == b"I"
                            and not self.corrupted.is_set()):
                        message[payload + XLOGDATA_HEADER] = ord("Z")
                        self.corrupted.set()
                    out += message
                client.sendall(out)
        except OSError:
            pass
        finally:
            client.close()


def test_corrupt_message_exits_4_with_lsn_and_hexdump_and_confirms_nothing(
        source, pg_server, tmp_path):
    dsn = source.source.dsn
    execute(dsn, "INSERT INTO items (id, name) VALUES (1, 'fine')")
    ingest(source)
    with psycopg.connect(dsn) as conn:
        confirmed_before = conn.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                        "WHERE slot_name = 'lakehouse'").fetchone()[0]
    execute(dsn, "INSERT INTO items (id, name) VALUES (2, 'will be corrupted')")

    proxy = CorruptingProxy(pg_server.port)
    proxied = dsn.replace(f"port={pg_server.port}", f"port={proxy.port}")
    config_path = write_config(tmp_path / "proxied.yml",
                               proxied + " sslmode=disable gssencmode=disable",
                               source.lake.path, ["public.items"])
    proc = start_lakehouse(config_path, "ingest", "--until-idle", "2", stderr=subprocess.PIPE,
                           text=True)
    _, stderr = proc.communicate(timeout=60)

    assert proxy.corrupted.is_set()
    assert proc.returncode == 4, stderr
    assert "cannot process the change at" in stderr
    assert "unknown message type" in stderr.lower()
    assert "00000000  5a" in stderr  # the hex dump starts with the corrupt 'Z'
    assert "Traceback" not in stderr
    with psycopg.connect(dsn) as conn:
        confirmed_after = conn.execute("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                       "WHERE slot_name = 'lakehouse'").fetchone()[0]
    assert confirmed_after == confirmed_before
    assert [r["values"][0] for r in bronze(source)] == ["1"]

    ingest(source)  # the clean connection: the change was not lost
    assert [r["values"][0] for r in bronze(source)] == ["1", "2"]
