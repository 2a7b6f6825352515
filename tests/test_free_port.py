"""free_port: the loopback ports the demo, the suite and `run`'s child endpoint bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from pipelines.embedded_pg import free_port

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not EPHEMERAL.exists(), reason="Linux's ephemeral port range")
def test_free_ports_lie_below_the_range_the_kernel_hands_out():
    """A port the kernel may give any socket (a JVM's, a client's) in the seconds before a
    server binds it would let clients reach the wrong server."""
    low = int(EPHEMERAL.read_text().split()[0])
    ports = [free_port() for _ in range(20)]
    assert all(1024 <= port < low for port in ports)
    for port in ports:  # free: each can be bound now
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
