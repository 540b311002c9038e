"""FaultProxy.hold_request: a request delivered late, after its client gave up, and kafka_request's match."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from eosink._waiting import wait_until
from eosink.services.kafka_cluster import kafka_request
from eosink.services.proxy import FaultProxy


class _Recorder:
    """A TCP server that records every byte it gets (with when) and answers each chunk with ``ok``."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.got: list[tuple[float, bytes]] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                self.got.append((time.monotonic(), data))
                conn.sendall(b"ok")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    r = _Recorder()
    yield r
    r.close()


def _request(api_key: int, body: bytes = b"x") -> bytes:
    payload = struct.pack(">hhi", api_key, 3, 7) + body
    return struct.pack(">i", len(payload)) + payload


def _wait(condition: Callable[[], bool]) -> None:
    assert wait_until(condition, 5.0, max_interval_s=0.01)


def test_kafka_request_matches_the_api_key_at_the_start_of_a_request_only() -> None:
    end_txn = kafka_request("EndTxn")
    assert end_txn.search(_request(26))
    assert not end_txn.search(_request(0))
    assert not end_txn.search(b"\x00\x00" + _request(26))  # not somewhere inside another request
    assert kafka_request(0).search(_request(0))


def test_a_held_request_reaches_the_server_late_even_after_its_client_left(recorder: _Recorder) -> None:
    """Pass: the held request is not there before its hold ends, arrives after its client closed the connection,
    and the request sent after it on the same connection arrives after it; others pass at once."""
    with FaultProxy("127.0.0.1", recorder.port) as proxy:
        proxy.hold_request(kafka_request("EndTxn"), 1.0)
        with socket.create_connection(("127.0.0.1", proxy.port)) as other:
            other.sendall(_request(0))
            assert other.recv(2) == b"ok"  # a produce passes at once
        client = socket.create_connection(("127.0.0.1", proxy.port))
        sent = time.monotonic()
        client.sendall(_request(26, b"held"))
        _wait(lambda: proxy.stats.holding == 1)  # the proxy holds it; then the client sends the next one
        client.sendall(_request(0, b"after"))
        client.close()  # the client gives up before the hold ends
        assert not any(b"held" in data for _, data in recorder.got)
        assert proxy.wait_for_held(5.0)
        _wait(lambda: any(b"after" in d for _, d in recorder.got))
        arrivals = {name: at for at, data in recorder.got for name in (b"held", b"after") if name in data}
        assert arrivals[b"held"] - sent >= 0.9
        assert arrivals[b"after"] >= arrivals[b"held"]
        assert [r[-4:] for r in proxy.stats.requests_held] == [b"held"]


def test_a_held_request_released_early_is_delivered_at_once(recorder: _Recorder) -> None:
    """Pass: a request held for ten minutes stays held until ``release_held``, then reaches the server."""
    with FaultProxy("127.0.0.1", recorder.port) as proxy:
        proxy.hold_request(kafka_request("EndTxn"), 600.0)
        with socket.create_connection(("127.0.0.1", proxy.port)) as client:
            client.sendall(_request(26, b"held"))
            _wait(lambda: proxy.stats.holding == 1)
            assert not proxy.wait_for_held(0.2)
            proxy.release_held()
            assert proxy.wait_for_held(5.0)
            assert client.recv(2) == b"ok"
        assert any(b"held" in data for _, data in recorder.got)
