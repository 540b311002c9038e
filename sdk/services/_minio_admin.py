"""MinIO's admin API from Python: users and policies for the secured server, without ``mc``.

The calls a test harness needs (add a user, create a policy, attach it, remove both) are signed
requests to ``/minio/admin/v3``, like any S3 request (SigV4, service ``s3``). Bodies that carry a
secret are encrypted with the caller's secret key, as MinIO's admin client does: a key derived by
PBKDF2-SHA256 (8192 rounds) from a random 32-byte salt, then AES-256-GCM over one final fragment
of the ``sio`` stream format (``salt | 0x02 | nonce | ciphertext``), which the server accepts
alongside its Argon2id variants.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from eosink.errors import ServiceError

__all__ = ["MinioAdmin", "encrypt_for_admin", "signed_request"]

_PBKDF2_AES_GCM = b"\x02"
_PBKDF2_ROUNDS = 8192


def signed_request(
    method: str, url: str, body: bytes, access_key: str, secret_key: str, region: str
) -> urllib.request.Request:
    """A request to MinIO signed as an S3 request is (SigV4, service ``s3``)."""
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials

    request = botocore.awsrequest.AWSRequest(
        method=method, url=url, data=body, headers={"x-amz-content-sha256": hashlib.sha256(body).hexdigest()}
    )
    botocore.auth.SigV4Auth(botocore.credentials.Credentials(access_key, secret_key), "s3", region).add_auth(request)
    return urllib.request.Request(url, data=body or None, method=method, headers=dict(request.headers))


def encrypt_for_admin(secret_key: str, data: bytes) -> bytes:
    """``data`` encrypted for MinIO's admin API with the caller's ``secret_key``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    salt = secrets.token_bytes(32)
    aead = AESGCM(hashlib.pbkdf2_hmac("sha256", secret_key.encode(), salt, _PBKDF2_ROUNDS, 32))
    nonce = secrets.token_bytes(8)
    # The stream binds each fragment to the stream's nonce: the tag of nothing under fragment 0's nonce,
    # flagged 0x80 for the final fragment; the one fragment here is number 1.
    binding = aead.encrypt(nonce + (0).to_bytes(4, "little"), b"", b"")
    sealed = aead.encrypt(nonce + (1).to_bytes(4, "little"), data, b"\x80" + binding)
    return salt + _PBKDF2_AES_GCM + nonce + sealed


class MinioAdmin:
    """Users and canned policies of one MinIO server, as its root user."""

    def __init__(self, endpoint_url: str, access_key: str, secret_key: str, region: str, ca: str | None = None):
        self.endpoint_url = endpoint_url.rstrip("/")
        self._access_key, self._secret_key, self.region = access_key, secret_key, region
        self._context = ssl.create_default_context(cafile=ca) if ca else None

    def __repr__(self) -> str:
        return f"MinioAdmin({self.endpoint_url!r})"

    def add_user(self, access_key: str, secret_key: str) -> None:
        body = json.dumps({"secretKey": secret_key, "status": "enabled"}).encode()
        self._call("PUT", "add-user", encrypt_for_admin(self._secret_key, body), accessKey=access_key)

    def remove_user(self, access_key: str) -> None:
        self._call("DELETE", "remove-user", accessKey=access_key)

    def set_policy(self, name: str, document: dict[str, Any]) -> None:
        """Create or replace the canned policy ``name``."""
        self._call("PUT", "add-canned-policy", json.dumps(document).encode(), name=name)

    def remove_policy(self, name: str) -> None:
        self._call("DELETE", "remove-canned-policy", name=name)

    def attach(self, user: str, policy: str) -> None:
        """Make ``policy`` the user's policy."""
        self._call("PUT", "set-user-or-group-policy", policyName=policy, userOrGroup=user, isGroup="false")

    def user_info(self, access_key: str) -> dict[str, Any]:
        found = self._call("GET", "user-info", accessKey=access_key)
        return dict(json.loads(found)) if found else {}

    def _call(self, method: str, path: str, body: bytes = b"", **query: str) -> bytes:
        url = f"{self.endpoint_url}/minio/admin/v3/{path}" + (f"?{urlencode(query)}" if query else "")
        sent = signed_request(method, url, body, self._access_key, self._secret_key, self.region)
        try:
            with urllib.request.urlopen(sent, timeout=30, context=self._context) as reply:
                return bytes(reply.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            raise ServiceError(
                f"MinIO's admin API refused {method} {path} ({exc.code}): {detail}",
                "read the MinIO log; the harness's root credentials may be stale (restart the service).",
            ) from None
