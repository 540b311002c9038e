"""The one translator of S3 errors: botocore's errors into eosink's error tree.

Every part of a file sink that talks to an S3 store (the S3 and Delta sinks' two sides, the readers,
the checkpoint file system, ``eosink status``) turns a botocore error into an eosink error here, so
the same failure is the same class everywhere: a missing bucket, refused credentials or a
missing permission are ConfigurationErrors (fix and restart), an object name the store refuses a
BadRecordError (the partition values made it), a dropped connection, a timeout
or a busy store a TransientError (retry), anything else an EosinkError naming the S3 code.
No secret reaches the text: every message is scrubbed, and the botocore error is not chained.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eosink._tls_probe import speaks_tls
from eosink.errors import (
    AuthenticationError,
    BadRecordError,
    ConfigurationError,
    EosinkError,
    PermissionDeniedError,
    TlsError,
    TransientError,
)
from eosink.stores.s3 import S3Connection

__all__ = [
    "PERMISSIONS",
    "action_of",
    "error_code",
    "http_status",
    "is_connection_error",
    "is_not_found",
    "is_precondition_failed",
    "tls_error",
    "translate",
    "translated",
]

PERMISSIONS = (
    "s3:ListBucket, s3:ListBucketMultipartUploads, s3:GetObject, s3:PutObject, s3:DeleteObject, "
    "s3:AbortMultipartUpload, s3:ListMultipartUploadParts"
)
"""What the sink's credentials need on the bucket (and, with sse='aws:kms', kms:GenerateDataKey and kms:Decrypt)."""

_TRANSIENT_CODES = {
    "SlowDown",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "XMinioServerNotInitialized",
    "XMinioStorageFull",
    "OperationAborted",
    "500",
    "502",
    "503",
    "504",
}
_CREDENTIAL_CODES = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "InvalidSecurity",
    "AuthorizationHeaderMalformed",
}
_DENIED_CODES = {"AccessDenied", "AllAccessDisabled", "AccountProblem", "403"}

#: The action each S3 request needs (a refused request names its operation, not the action).
_OPERATIONS = {
    "HeadBucket": "s3:ListBucket",
    "ListObjectsV2": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "CopyObject": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "DeleteObjects": "s3:DeleteObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "ListParts": "s3:ListMultipartUploadParts",
}


def action_of(operation: str) -> str | None:
    """The IAM action a refused S3 request (botocore's ``operation_name``) needed."""
    return _OPERATIONS.get(operation)


def error_code(exc: BaseException) -> str:
    """The S3 error code of a botocore ClientError ('' for other errors)."""
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))


def http_status(exc: BaseException) -> int | None:
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def is_not_found(exc: BaseException) -> bool:
    """NoSuchKey (GET) or a bare 404 (HEAD)."""
    return error_code(exc) in ("NoSuchKey", "404", "NotFound")


def is_precondition_failed(exc: BaseException) -> bool:
    """412: an If-None-Match / If-Match condition did not hold (409 ConditionalRequestConflict: a concurrent one)."""
    return http_status(exc) in (412, 409) or error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict")


def is_connection_error(exc: BaseException) -> bool:
    """The request may have reached the store but no answer came back (or no connection was made)."""
    from botocore import exceptions as bx

    return isinstance(
        exc,
        (
            bx.EndpointConnectionError,
            bx.ConnectionClosedError,
            bx.ReadTimeoutError,
            bx.ConnectTimeoutError,
            bx.ProxyConnectionError,
            bx.ResponseStreamingError,
            bx.HTTPClientError,
        ),
    )


@contextmanager
def translated(conn: S3Connection, what: str) -> Iterator[None]:
    """Raise botocore errors of the block as eosink errors (:func:`translate`); eosink errors pass through."""
    from botocore import exceptions as bx

    try:
        yield
    except EosinkError:
        raise
    except (bx.BotoCoreError, bx.ClientError) as exc:
        raise translate(conn, exc, what) from None


def translate(conn: S3Connection, exc: BaseException, what: str) -> EosinkError:
    """The eosink error for ``exc``, raised while doing ``what`` (for the message)."""
    from botocore import exceptions as bx

    where = f"{what} on S3 at {conn.describe()}"
    code = error_code(exc)
    detail = conn.scrub(f"{type(exc).__name__}: {str(exc).strip()}")
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.ProfileNotFound)):
        return ConfigurationError(f"{where}: no usable credentials ({detail}).", _CREDENTIALS_FIX)
    if isinstance(exc, bx.SSLError):
        return tls_error(where, detail)
    if isinstance(exc, bx.ParamValidationError):
        return ConfigurationError(f"{where}: a request was refused before it was sent ({detail}).", _REPORT_FIX)
    if is_connection_error(exc):
        return TransientError(
            f"{where} failed: no answer from the store ({detail}).",
            "Retry; if it persists, check that endpoint_url names a running S3 API that this machine can reach.",
        )
    bucket_op = getattr(exc, "operation_name", "") in ("HeadBucket", "GetBucketLocation")
    if code == "NoSuchBucket" or (code in ("404", "NotFound") and (bucket_op or "Bucket" in what)):
        return ConfigurationError(
            f"{where}: the bucket does not exist ({detail}).",
            "Create the bucket, or fix bucket= (and endpoint_url/region if the bucket lives elsewhere).",
        )
    if code in _CREDENTIAL_CODES:
        return AuthenticationError(f"{where}: the store refused the credentials ({detail}).", _CREDENTIALS_FIX)
    if http_status(exc) == 400 and code in ("", "400", "BadRequest") and _tls_only(conn):
        return TlsError(
            f"{where}: the store at {conn.describe()} speaks TLS only, and the request was plain HTTP ({detail}).",
            "Use an https:// endpoint_url (with ca_bundle if its certificate is signed by a CA of your own).",
        )
    if code in _DENIED_CODES:
        action = action_of(getattr(exc, "operation_name", ""))
        if action is None:
            return PermissionDeniedError(
                f"{where} was refused: access denied ({detail}).",
                f"Grant the sink's credentials {PERMISSIONS} on the bucket and prefix (a 403 on a HEAD request can "
                "also mean wrong credentials: check them too).",
                permission=PERMISSIONS,
            )
        return PermissionDeniedError(
            f"{where} was refused: access denied to {getattr(exc, 'operation_name', '')}, which needs {action} "
            f"({detail}).",
            f"Allow {action} to the sink's credentials on the bucket and prefix (the connector's docs list every "
            "action the sink needs), then restart the query.",
            permission=action,
        )
    if code in (
        "KMS.NotFoundException",
        "KMS.DisabledException",
        "KMSInvalidStateException",
        "InvalidEncryptionAlgorithmError",
    ):
        return ConfigurationError(
            f"{where}: server-side encryption was refused ({detail}).", "Fix sse and sse_kms_key_id."
        )
    if code in ("KeyTooLongError", "XMinioInvalidObjectName"):
        return BadRecordError(
            f"{where}: the store refused the object's name ({detail}).",
            "Shorten the prefix and the partition values: at most 1024 bytes per key, and (MinIO) 255 bytes "
            "between two slashes.",
        )
    if code in _TRANSIENT_CODES or (http_status(exc) or 0) >= 500:
        return TransientError(f"{where} failed: the store is busy or failing ({detail}).", "Retry with backoff.")
    if code in ("NotImplemented", "501"):
        return ConfigurationError(
            f"{where}: the store does not implement a request eosink needs ({detail}).",
            "Use an S3 API with multipart uploads and conditional writes (AWS S3, MinIO from 2024 on).",
        )
    return EosinkError(f"{where} failed: {detail}.", _REPORT_FIX)


_CREDENTIALS_FIX = (
    "Check the access key and secret key (access_key_id and secret_access_key, or the AWS_* / EOSINK_S3_* "
    "environment variables, or the profile), that a session token has not expired, and that region matches the "
    "store; then restart the query."
)
_REPORT_FIX = "See the S3 error above; if it looks like a bug in eosink, report it with this message."


def tls_error(where: str, detail: str) -> TlsError:
    """The TLS handshake with the store failed (as botocore or rustls says it): whom the certificate names, or
    who signed it."""
    if "doesn't match" in detail or "mismatch" in detail.lower() or "NotValidForName" in detail:
        return TlsError(
            f"{where}: the store's certificate does not name the host of endpoint_url ({detail}).",
            "Use an endpoint_url whose host the certificate carries, or have the certificate reissued for it.",
        )
    return TlsError(
        f"{where}: the store's certificate is not signed by a CA this client trusts ({detail}).",
        "Point ca_bundle (or AWS_CA_BUNDLE) at the CA that signed the store's certificate.",
    )


def _tls_only(conn: S3Connection) -> bool:
    """Whether a plain ``http://`` endpoint is in fact a TLS listener (a bare 400 is its answer to plain HTTP)."""
    from urllib.parse import urlsplit

    if conn.endpoint_url is None or not conn.endpoint_url.startswith("http://"):
        return False
    parts = urlsplit(conn.endpoint_url)
    return speaks_tls(parts.hostname or "localhost", parts.port or 80)
