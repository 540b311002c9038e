"""The private MinIO that the chaos harness and the S3 demo restart and crash on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from eosink._procs import is_alive
from eosink.services.minio import MinioServer

pytestmark = pytest.mark.timeout(300)


def _client(server: MinioServer) -> object:
    import boto3
    from botocore.config import Config

    ep = server.endpoint
    return boto3.client(
        "s3",
        endpoint_url=ep.endpoint_url,
        aws_access_key_id=ep.access_key,
        aws_secret_access_key=ep.secret_key,
        region_name=ep.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def test_a_crashed_private_minio_comes_back_on_its_port_with_its_data(tmp_path: Path) -> None:
    server = MinioServer(tmp_path / "minio")
    try:
        endpoint = server.start()
        assert server.endpoint.secret_key not in repr(server) + repr(endpoint)
        s3: object = _client(server)
        s3.create_bucket(Bucket="kept-bucket")  # type: ignore[attr-defined]
        s3.put_object(Bucket="kept-bucket", Key="k", Body=b"kept")  # type: ignore[attr-defined]
        first = server.proc
        assert first is not None
        server.restart(crash=True)
        assert not is_alive(first.pid) and server.proc is not None and server.proc.pid != first.pid
        assert server.endpoint == endpoint
        body = _client(server).get_object(Bucket="kept-bucket", Key="k")["Body"].read()  # type: ignore[attr-defined]
        assert body == b"kept"
    finally:
        proc = server.proc
        server.close()
    assert proc is not None and not is_alive(proc.pid) and server.proc is None
