"""The round-robin balancer in front of the MinIO cluster, with plain sockets: turns, skips, bytes unchanged."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from eosink.services._balancer import Backend, Balancer


class _Named:
    """A TCP server that reads a connection to its end, then answers its name and the SHA-256 of what it got."""

    def __init__(self, name: bytes) -> None:
        self.name = name
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn:
            digest = hashlib.sha256()
            while data := conn.recv(65536):
                digest.update(data)
            conn.sendall(self.name + b" " + digest.hexdigest().encode())

    def close(self) -> None:
        self.sock.close()


def _closed_port() -> int:
    """A port nothing listens on (connections to it are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def servers() -> Iterator[list[_Named]]:
    made = [_Named(name) for name in (b"a", b"b", b"c")]
    yield made
    for server in made:
        server.close()


def _ask(balancer: Balancer, payload: bytes = b"hello") -> bytes:
    """Send ``payload`` through the balancer, half-close, and read the answer to its end."""
    with socket.create_connection(("127.0.0.1", balancer.port), timeout=10) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while data := sock.recv(65536):
            answer += data
    return answer


def _names(balancer: Balancer, n: int) -> list[bytes]:
    return [_ask(balancer).split(b" ")[0] for _ in range(n)]


def test_connections_go_to_the_backends_in_turn_with_their_bytes_unchanged(servers: list[_Named]) -> None:
    """Pass: six connections go a, b, c, a, b, c; 3 MB sent through one arrive whole (the server's digest), and the
    client's half-close reaches the server."""
    with Balancer([Backend("127.0.0.1", s.port) for s in servers]) as balancer:
        assert _names(balancer, 6) == [b"a", b"b", b"c"] * 2
        payload = os.urandom(3 << 20)
        assert _ask(balancer, payload) == b"a " + hashlib.sha256(payload).hexdigest().encode()
        assert balancer.stats.connections == [3, 2, 2]
        assert balancer.stats.skipped == [0, 0, 0]


def test_a_backend_that_refuses_connections_is_skipped(servers: list[_Named]) -> None:
    """Pass: with b's port refusing, connections alternate between a and c, and b counts as skipped."""
    backends = [Backend("127.0.0.1", servers[0].port), Backend("127.0.0.1", _closed_port())]
    backends.append(Backend("127.0.0.1", servers[2].port))
    with Balancer(backends) as balancer:
        assert _names(balancer, 4) == [b"a", b"c", b"c", b"a"]
        assert balancer.stats.connections == [2, 0, 2]
        assert balancer.stats.skipped == [0, 1, 0]


def test_a_backend_whose_health_port_refuses_is_skipped_although_its_port_accepts(servers: list[_Named]) -> None:
    """Pass: b accepts connections (a proxy whose server died), but its health port (the server's own) refuses:
    it gets none; once its health port is b's own live port, it gets its turn again."""
    dead = Backend("127.0.0.1", servers[1].port, health_port=_closed_port())
    with Balancer([Backend("127.0.0.1", servers[0].port), dead]) as balancer:
        assert _names(balancer, 3) == [b"a", b"a", b"a"]
        assert balancer.stats.connections == [3, 0]
    live = Backend("127.0.0.1", servers[1].port, health_port=servers[1].port)
    with Balancer([Backend("127.0.0.1", servers[0].port), live]) as balancer:
        assert _names(balancer, 2) == [b"a", b"b"]


def test_with_every_backend_down_a_client_is_turned_away_at_once() -> None:
    """Pass: the client's connection is closed without an answer; the balancer counts it."""
    with Balancer([Backend("127.0.0.1", _closed_port()), Backend("127.0.0.1", _closed_port())]) as balancer:
        try:
            answer = _ask(balancer)
        except OSError:  # closed before the client's send or half-close: reset, broken pipe, not connected
            answer = b""
        assert answer == b""
        assert balancer.stats.turned_away == 1
        assert balancer.stats.skipped == [1, 1]


def test_a_balancer_listens_on_loopback_only_and_needs_a_backend() -> None:
    with pytest.raises(ValueError, match="loopback"):
        Balancer([Backend("127.0.0.1", 1)], listen_host="0.0.0.0")
    with pytest.raises(ValueError, match="at least one"):
        Balancer([])
