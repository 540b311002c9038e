"""Whether a server speaks TLS: what the connectors ask when a plaintext request failed oddly.

A client that speaks plain HTTP or plain Kafka to a TLS-only listener gets a bare 400 or a closed
connection, which reads as a broken or missing server. One TLS handshake (the certificate not
checked: only whether the listener speaks TLS) tells the two apart, so the error can say "use TLS".
"""

from __future__ import annotations

import socket
import ssl

__all__ = ["speaks_tls"]


def speaks_tls(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """Whether ``host:port`` completes a TLS handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, context.wrap_socket(raw):
            return True
    except (OSError, ssl.SSLError):
        return False
