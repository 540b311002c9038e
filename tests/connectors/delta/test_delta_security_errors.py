"""The Delta translator names refused requests, credentials and TLS failures by their class and fix."""

from __future__ import annotations

import pytest

from eosink.connectors.delta import DeltaConfig
from eosink.connectors.delta._errors import translate
from eosink.errors import AuthenticationError, PermissionDeniedError, TlsError

S3 = DeltaConfig(
    "s3://b/t", endpoint_url="https://127.0.0.1:9", region="us-east-1", access_key_id="k", secret_access_key="s3cr3t-x"
)
HDFS = DeltaConfig("hdfs://nn:8020/data/events")


def _refusal(request: str) -> OSError:
    return OSError(
        f"Kernel error -> Generic S3 error: Error performing {request} in 2ms - Server returned non-2xx status code"
        " -> 403 Forbidden -> <Error><Code>AccessDenied</Code></Error>"
    )


@pytest.mark.parametrize(
    ("request_line", "action"),
    [
        ("GET https://h/b?list-type=2&prefix=t%2F_delta_log%2F", "s3:ListBucket"),
        ("GET https://h/b/t/_delta_log/_last_checkpoint", "s3:GetObject"),
        ("HEAD https://h/b/t/part-0.parquet", "s3:GetObject"),
        ("PUT https://h/b/t/_delta_log/00000000000000000001.json", "s3:PutObject"),
        ("DELETE https://h/b/t/part-0.parquet", "s3:DeleteObject"),
    ],
)
def test_a_refused_delta_rs_request_names_the_action_it_needed(request_line: str, action: str) -> None:
    err = translate(S3, _refusal(request_line), "committing")
    assert isinstance(err, PermissionDeniedError) and err.permission == action
    assert action in (err.fix or "") and "s3cr3t-x" not in str(err)


def test_refused_credentials_and_tls_failures_are_typed() -> None:
    creds = translate(S3, OSError("403 Forbidden <Code>InvalidAccessKeyId</Code>"), "opening the table")
    assert type(creds) is AuthenticationError
    issuer = translate(S3, OSError("error sending request: invalid peer certificate: UnknownIssuer"), "opening")
    assert type(issuer) is TlsError and "ca_bundle" in (issuer.fix or "")
    name = translate(S3, OSError("invalid peer certificate: NotValidForName"), "opening")
    assert type(name) is TlsError and "host" in name.problem


def test_an_hdfs_refusal_names_the_permission_and_the_command() -> None:
    text = 'AccessControlException: Permission denied: user=writer, access=WRITE, inode="/data/events/_delta_log"'
    err = translate(HDFS, PermissionError(text), "committing")
    assert isinstance(err, PermissionDeniedError)
    assert err.permission == "rwx on /data/events (its owner)"
    assert "hdfs dfs -chown" in (err.fix or "")
