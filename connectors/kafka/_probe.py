"""Why a Kafka bootstrap failed: one connection made by hand, step by step (TCP, TLS, SASL).

kafka-python answers an untrusted certificate, a host name the certificate does not carry, a
listener that wants TLS and refused credentials alike: the bootstrap times out ("Unable to
bootstrap"), which reads as an outage and would be retried for ever. When a bootstrap fails, the
sink opens one connection to the first bootstrap server itself, with the same settings, and names
the step that failed: a :class:`~eosink.errors.TlsError` or an
:class:`~eosink.errors.AuthenticationError`; None when the broker is simply not there (the caller's
TransientError stands). The password goes into the SASL exchange only, never into a message.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from eosink._tls_probe import speaks_tls
from eosink.errors import AuthenticationError, ConfigurationError, EosinkError, TlsError

__all__ = ["diagnose"]

_SASL_HANDSHAKE, _SASL_AUTHENTICATE = 17, 36
_UNSUPPORTED_MECHANISM, _AUTHENTICATION_FAILED = 33, 58


def diagnose(bootstrap: str, options: Mapping[str, Any], timeout_s: float = 5.0) -> EosinkError | None:
    """The configuration error behind a failed bootstrap to ``bootstrap`` with kafka-python ``options``, or None."""
    host, _, port_text = bootstrap.split(",")[0].strip().rpartition(":")
    host = host.strip("[]") or "localhost"
    try:
        port = int(port_text)
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except (OSError, ValueError):
        return None  # not there: an outage, not a configuration
    protocol = str(options.get("security_protocol", "PLAINTEXT")).upper()
    where = f"Kafka at {host}:{port}"
    sock: socket.socket = raw
    try:
        if protocol in ("SSL", "SASL_SSL"):
            try:
                sock = _context(options).wrap_socket(raw, server_hostname=host)
            except ssl.SSLCertVerificationError as exc:
                return _untrusted(where, host, exc)
            except (ssl.SSLError, OSError):
                return TlsError(
                    f"{where} did not complete a TLS handshake: its listener does not speak TLS "
                    f"(security_protocol={protocol}).",
                    "Use the security_protocol the listener speaks (PLAINTEXT or SASL_PLAINTEXT for a plaintext "
                    "listener), or connect to the broker's TLS listener.",
                )
        elif speaks_tls(host, port, timeout_s):
            return TlsError(
                f"{where} requires TLS, and security_protocol={protocol} does not speak it.",
                "Set producer_options security_protocol to SASL_SSL (or SSL) and ssl_cafile to the CA that signed "
                "the broker's certificate.",
            )
        if protocol.startswith("SASL"):
            return _authenticate(sock, where, options)
        return None
    except (OSError, ValueError, struct.error):
        return None
    finally:
        sock.close()


def _context(options: Mapping[str, Any]) -> ssl.SSLContext:
    given = options.get("ssl_context")
    if isinstance(given, ssl.SSLContext):
        return given
    context = ssl.create_default_context(cafile=options.get("ssl_cafile"))
    context.check_hostname = bool(options.get("ssl_check_hostname", True))
    if options.get("ssl_certfile"):
        context.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"), options.get("ssl_password"))
    return context


def _untrusted(where: str, host: str, exc: ssl.SSLCertVerificationError) -> TlsError:
    reason = exc.verify_message or str(exc)
    if "mismatch" in reason.lower():
        return TlsError(
            f"{where}: the broker's certificate does not name {host!r} ({reason}).",
            "Connect by a name the certificate carries (the broker's advertised host), or have its certificate "
            "reissued for this name; keep ssl_check_hostname on.",
        )
    return TlsError(
        f"{where}: the broker's certificate is not signed by a CA this client trusts ({reason}).",
        "Point producer_options ssl_cafile at the CA that signed the broker's certificate.",
    )


def _authenticate(sock: socket.socket, where: str, options: Mapping[str, Any]) -> EosinkError | None:
    """SaslHandshake then SaslAuthenticate (PLAIN or SCRAM) as kafka-python would: the broker's verdict."""
    mechanism = str(options.get("sasl_mechanism", "PLAIN")).upper()
    user = str(options.get("sasl_plain_username") or "")
    password = str(options.get("sasl_plain_password") or "")
    code, body = _call(sock, _SASL_HANDSHAKE, 1, _string(mechanism))
    if code == _UNSUPPORTED_MECHANISM:
        count, offered, at = struct.unpack_from(">i", body)[0], [], 4
        for _ in range(max(count, 0)):
            text, at = _read_string(body, at)
            offered.append(text or "")
        return ConfigurationError(
            f"{where} does not offer SASL mechanism {mechanism} (it offers {', '.join(offered) or 'none'}).",
            "Set producer_options sasl_mechanism to one the broker offers.",
        )
    if code:
        return None
    if mechanism == "PLAIN":
        steps = [b"\0" + user.encode() + b"\0" + password.encode()]
        verdict = _exchange(sock, steps[0])
    elif mechanism.startswith("SCRAM-"):
        from kafka.net.sasl.scram import ScramClient  # kafka-python is pinned to 3.0.x

        client = ScramClient(user, password, mechanism)
        verdict = _exchange(sock, client.first_message())
        if verdict[0] == 0:
            client.process_server_first_message(verdict[2])
            verdict = _exchange(sock, client.final_message())
    else:
        return None  # GSSAPI, OAUTHBEARER: not probed
    if verdict[0] == _AUTHENTICATION_FAILED:
        return AuthenticationError(
            f"{where} refused the credentials of User:{user} ({mechanism}: {verdict[1] or 'authentication failed'}).",
            "Check sasl_plain_username, sasl_plain_password and sasl_mechanism in producer_options.",
        )
    return None


def _exchange(sock: socket.socket, token: bytes) -> tuple[int, str | None, bytes]:
    code, body = _call(sock, _SASL_AUTHENTICATE, 1, struct.pack(">i", len(token)) + token)
    message, at = _read_string(body, 0)
    size = struct.unpack_from(">i", body, at)[0]
    return code, message, body[at + 4 : at + 4 + max(size, 0)]


def _call(sock: socket.socket, api_key: int, version: int, body: bytes) -> tuple[int, bytes]:
    """One request (header v1, non-flexible); the response's error code and the rest of its body."""
    header = struct.pack(">hhi", api_key, version, 1) + _string("eosink-probe")
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    size = struct.unpack(">i", _read(sock, 4))[0]
    response = _read(sock, size)
    return struct.unpack_from(">h", response, 4)[0], response[6:]


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise OSError("the broker closed the connection")
        out += chunk
    return out


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _read_string(buf: bytes, at: int) -> tuple[str | None, int]:
    size = struct.unpack_from(">h", buf, at)[0]
    if size < 0:
        return None, at + 2
    return buf[at + 2 : at + 2 + size].decode(errors="replace"), at + 2 + size
