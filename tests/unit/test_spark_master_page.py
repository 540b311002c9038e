"""The Spark master's JSON page as the standalone harness reads it: an empty or partial body (the web UI answers
one for a moment as the master starts) is "not yet", never an error out of a start or a poll."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from eosink.errors import ServiceError
from eosink.services import spark_standalone
from eosink.services.spark_standalone import SparkStandalone

_ALIVE = {"status": "ALIVE", "workers": [{"host": "127.0.0.2", "port": 7078, "state": "ALIVE", "lastheartbeat": 1}]}


class _Page:
    """An HTTP server on loopback answering ``bodies`` in turn, then the last one for ever."""

    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies, self.asked = bodies, 0
        page = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = page.bodies[min(page.asked, len(page.bodies) - 1)]
                page.asked += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SparkStandalone]:
    found = SparkStandalone(tmp_path, workers=1)
    found.workers[0].port = 7078
    yield found


def _serve(cluster: SparkStandalone, bodies: list[bytes]) -> Iterator[_Page]:
    page = _Page(bodies)
    cluster.master_webui_port = page.port
    try:
        yield page
    finally:
        page.close()


def test_an_empty_then_partial_page_is_read_again_until_it_parses(cluster: SparkStandalone) -> None:
    for page in _serve(cluster, [b"", b'{"status": "AL', json.dumps(_ALIVE).encode()]):
        assert not cluster._master_alive()  # the empty body: not yet
        assert not cluster._master_alive()  # the partial one: not yet
        assert cluster._master_alive()
        assert cluster.worker_states() == {0: "ALIVE"}
        assert page.asked == 4


def test_polls_of_the_workers_read_through_a_moment_of_empty_pages(cluster: SparkStandalone) -> None:
    for page in _serve(cluster, [b"", b"", json.dumps(_ALIVE).encode()]):
        cluster.wait_worker_state(0, "ALIVE", timeout_s=10)
        assert page.asked == 3


def test_a_page_that_never_parses_is_a_service_error_naming_the_page(
    cluster: SparkStandalone, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spark_standalone, "_PAGE_TIMEOUT_S", 0.5)
    for _ in _serve(cluster, [b"<html>"]):
        assert not cluster._master_alive()
        with pytest.raises(ServiceError, match="JSON page"):
            cluster.state()
