"""boto3 S3 clients, made once per process and connection (making one costs tens of milliseconds).

Two flavours per connection:

* ``retrying``: botocore's standard retries (``max_attempts``), for reads and for data uploads,
  which are harmless to repeat (a part uploaded twice is replaced; a listing read twice is read);
* ``single``: one attempt only, for the requests whose outcome eosink must know exactly (completing
  uploads, the create-only commit marker, the epoch's conditional writes): a retry hidden inside
  botocore would turn "my write landed but the reply was lost" into a confusing 412 or NoSuchUpload.

Clients are thread-safe; a forked or unpickled process makes its own (the cache is keyed by PID).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from eosink.errors import ConfigurationError

if TYPE_CHECKING:
    from eosink.stores.s3 import S3Connection

__all__ = ["client", "forget"]

_LOCK = threading.Lock()
_CLIENTS: dict[tuple[int, S3Connection, bool], Any] = {}


def client(conn: S3Connection, *, retrying: bool = True) -> Any:
    """The boto3 S3 client of ``conn`` in this process (``retrying=False``: botocore never retries)."""
    key = (os.getpid(), conn, retrying)
    found = _CLIENTS.get(key)
    if found is not None:
        return found
    with _LOCK:
        found = _CLIENTS.get(key)
        if found is None:
            found = _CLIENTS[key] = _make(conn, retrying)
    return found


def forget(conn: S3Connection) -> None:
    """Drop this process's clients of ``conn`` (the next call makes new ones)."""
    with _LOCK:
        for key in [k for k in _CLIENTS if k[1] == conn]:
            del _CLIENTS[key]


def _make(conn: S3Connection, retrying: bool) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigurationError("Writing to S3 needs boto3.", "pip install 'eosink[s3]' (or eosink[delta]).") from None
    session = boto3.session.Session(profile_name=conn.profile) if conn.profile else boto3.session.Session()
    config = Config(
        s3={"addressing_style": "path" if conn.uses_path_style else "virtual"},
        connect_timeout=conn.connect_timeout_s,
        read_timeout=conn.read_timeout_s,
        retries={"mode": "standard", "total_max_attempts": conn.max_attempts if retrying else 1},
        max_pool_connections=32,
        tcp_keepalive=True,
        # Checksums only where S3 requires them: S3-compatible stores differ in what they accept.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    made = session.client(
        "s3",
        endpoint_url=conn.endpoint_url,
        region_name=conn.region or ("us-east-1" if conn.endpoint_url else None),
        aws_access_key_id=conn.access_key_id,
        aws_secret_access_key=conn.secret_access_key,
        aws_session_token=conn.session_token,
        config=config,
        verify=conn.ca_bundle,  # None: the system's CAs (or AWS_CA_BUNDLE)
    )
    if not retrying:
        # No "Expect: 100-continue" on commit requests: their bodies are small, and a request whose body
        # waits for the server's go-ahead is not one request on the wire (a cut between headers and body
        # would look like a lost reply to a request that never reached the store).
        made.meta.events.register_last("before-call.s3", _no_expect)
    return made


def _no_expect(params: dict[str, Any], **kwargs: Any) -> None:
    params.get("headers", {}).pop("Expect", None)
