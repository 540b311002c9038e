"""An S3 endpoint that ignores conditional writes, in front of the test MinIO: what a store without
``If-None-Match``/``If-Match`` does, for the sinks whose setup must refuse it (S3, Delta)."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

__all__ = ["NoConditionsProxy"]


class NoConditionsProxy:
    """An S3 endpoint that ignores conditional writes: it forwards every request to MinIO, but drops the
    If-None-Match and If-Match headers of a request first (signing it again, as the client would have
    without them), so a PUT that should be refused with 412 overwrites instead."""

    def __init__(self, endpoint: Any) -> None:
        self.endpoint = endpoint  # the service harness's MinIO: endpoint_url, access_key, secret_key, region
        self.target = urlsplit(endpoint.endpoint_url)
        self.stripped = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_any(self) -> None:
                proxy.forward(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_any

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: requests carry signatures."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="no-conditions-proxy", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "expect"}
        if any(k.lower() in ("if-none-match", "if-match") for k in headers):
            headers = self._resign(handler.command, handler.path, headers, body)
            self.stripped += 1
        upstream = http.client.HTTPConnection(self.target.hostname or "127.0.0.1", self.target.port, timeout=30)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            reply = upstream.getresponse()
            data = reply.read()
            handler.send_response(reply.status, reply.reason)
            for key, value in reply.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    handler.send_header(key, value)
            shown = reply.getheader("Content-Length") if handler.command == "HEAD" else str(len(data))
            handler.send_header("Content-Length", shown or "0")
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(data)
        finally:
            upstream.close()

    def _resign(self, method: str, path: str, headers: dict[str, str], body: bytes) -> dict[str, str]:
        """The request's headers without the conditions, signed again with the endpoint's credentials."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        drop = {"if-none-match", "if-match", "authorization", "x-amz-date", "x-amz-content-sha256"}
        kept = {k: v for k, v in headers.items() if k.lower() not in drop}
        ep = self.endpoint
        request = AWSRequest(method=method, url=f"http://{headers['Host']}{path}", data=body, headers=kept)
        S3SigV4Auth(Credentials(ep.access_key, ep.secret_key), "s3", ep.region).add_auth(request)
        return dict(request.headers.items())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
