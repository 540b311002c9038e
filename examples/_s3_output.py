"""The output side the S3 examples share: the bucket, and what a reader of the commit markers reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eosink.connectors.s3 import S3Config, read_committed


def ensure_bucket(config: S3Config) -> None:
    """Create the bucket when it is missing (the harness's MinIO starts empty)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    conn = config.connection()
    s3 = boto3.client(
        "s3",
        endpoint_url=conn.endpoint_url,
        region_name=conn.region,
        aws_access_key_id=conn.access_key_id,
        aws_secret_access_key=conn.secret_access_key,
        aws_session_token=conn.session_token,
        config=Config(s3={"addressing_style": "path" if conn.uses_path_style else "auto"}),
    )
    try:
        s3.head_bucket(Bucket=config.bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
            raise
        where = {} if conn.region in (None, "us-east-1") else {"LocationConstraint": conn.region}
        s3.create_bucket(Bucket=config.bucket, **({"CreateBucketConfiguration": where} if where else {}))


def count_committed(config: S3Config, app_id: str, identity: Callable[[dict[str, Any]], Any]) -> tuple[int, int]:
    """(rows, distinct identities) that a reader of ``app_id``'s commit markers reads under the prefix."""
    rows = read_committed(config, app_id).to_pylist()
    return len(rows), len({identity(r) for r in rows})
