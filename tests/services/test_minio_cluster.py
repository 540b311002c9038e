"""The four-node MinIO cluster of the failover tests: one erasure set of eight drives behind a round-robin balancer.

One cluster for the module (four processes start and format together); each test leaves every node running. Every
S3 call goes through the balancer unless a test pins a node. No sleeps: what takes time is polled with a bound.

For a moment after a node dies or comes back (seen: up to about 10 s on a busy 2-core machine), a surviving node
may refuse writes with 503 ``SlowDownWrite`` (it counts too few drives online for the write quorum), as MinIO tells
clients to back off and retry. Calls that may meet that are retried by :func:`_eventually`, a new client (through
the balancer: the next node) each time, within a bound.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from eosink._procs import is_alive
from eosink._waiting import wait_until
from eosink.services.minio import S3Endpoint
from eosink.services.minio_cluster import MinioCluster

pytestmark = [pytest.mark.full, pytest.mark.timeout(600)]

T = TypeVar("T")
#: MinIO's "back off and retry" answers (503).
_BUSY = frozenset({"SlowDownWrite", "SlowDownRead", "SlowDown", "ServiceUnavailable"})
BUSY_BOUND_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioCluster]:
    c = MinioCluster(Path(tmp_path_factory.mktemp("minio-cluster")))
    try:
        c.start()
    except BaseException:
        c.close()
        raise
    yield c
    pids = [n.proc.pid for n in c.nodes.values() if n.proc is not None]
    c.close()
    assert len(pids) == 4 and not any(is_alive(pid) for pid in pids)
    assert c.running() == []


@pytest.fixture
def bucket(cluster: MinioCluster) -> str:
    cluster.wait_can_lose_a_node()  # every node back from an earlier test's fault, and counted by every other
    name = f"mc-{secrets.token_hex(4)}"
    _create_bucket(cluster.endpoint, name)
    return name


def _create_bucket(endpoint: S3Endpoint, name: str) -> None:
    def create() -> None:
        s3 = _client(endpoint)
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):  # a retry after a lost reply: ours
            s3.create_bucket(Bucket=name)

    _eventually(create)


def _eventually(call: Callable[[], T], busy: list[str] | None = None) -> T:
    """``call()`` again while MinIO answers 503 (see the module docstring), within :data:`BUSY_BOUND_S`; each such
    answer is noted in ``busy``."""
    from botocore.exceptions import ClientError

    seen = busy if busy is not None else []
    result: list[T] = []

    def once() -> bool:
        try:
            result.append(call())
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            if code not in _BUSY:
                raise
            seen.append(code)
            return False
        return True

    assert wait_until(once, BUSY_BOUND_S, interval_s=0.05, max_interval_s=1.0), f"still {seen[-1:]} after retries"
    return result[0]


def _client(endpoint: S3Endpoint) -> Any:
    """A new boto3 client (so a new connection, and the balancer's next turn)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint.endpoint_url,
        aws_access_key_id=endpoint.access_key,
        aws_secret_access_key=endpoint.secret_key,
        region_name=endpoint.region,
        config=Config(
            s3={"addressing_style": "path"},
            connect_timeout=5,
            read_timeout=60,
            retries={"mode": "standard", "max_attempts": 2},
        ),
    )


def _get(endpoint: S3Endpoint, bucket: str, key: str) -> bytes:
    return _eventually(lambda: bytes(_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()))


def _put(endpoint: S3Endpoint, bucket: str, key: str, body: bytes, busy: list[str] | None = None) -> None:
    _eventually(lambda: _client(endpoint).put_object(Bucket=bucket, Key=key, Body=body), busy)


def test_four_nodes_are_one_erasure_set_of_eight_drives_behind_a_balancer(cluster: MinioCluster, bucket: str) -> None:
    """Pass: the drives' format lists one set of 8; four clients' puts through the balancer land on four nodes, and
    each node serves every object; no secret in a repr."""
    assert cluster.running() == [1, 2, 3, 4]
    fmt = json.loads((cluster.root / "n3" / "d2" / ".minio.sys" / "format.json").read_text())
    assert [len(s) for s in fmt["xl"]["sets"]] == [8]
    assert cluster.balancer is not None
    before = list(cluster.balancer.stats.connections)
    for k in range(4):
        _client(cluster.endpoint).put_object(Bucket=bucket, Key=f"k{k}", Body=b"v%d" % k)  # no retry: 4 connections
    assert all(now > then for now, then in zip(cluster.balancer.stats.connections, before, strict=True))
    for node in (1, 2, 3, 4):
        assert _get(cluster.node_endpoint(node), bucket, "k3") == b"v3"
    secret = cluster.endpoint.secret_key
    assert secret not in repr(cluster) + repr(cluster.endpoint) + repr(cluster.balancer)


def test_with_a_node_killed_puts_and_gets_through_the_balancer_work_and_it_comes_back(
    cluster: MinioCluster, bucket: str
) -> None:
    """Pass: node 1 SIGKILLed (6 of 8 drives left, write quorum 5), puts and gets through the balancer succeed and
    the balancer skips the dead node (503 answers retried, within a bound); restarted, node 1 serves the objects
    written without it."""
    _put(cluster.endpoint, bucket, "before", b"before")
    assert cluster.balancer is not None
    skipped = cluster.balancer.stats.skipped[0]
    cluster.kill(1)
    busy: list[str] = []
    try:
        assert cluster.running() == [2, 3, 4]
        for k in range(4):  # four new connections at least: node 1's turn comes, and is skipped
            _put(cluster.endpoint, bucket, f"without-1/{k}", b"w%d" % k, busy)
            assert _get(cluster.endpoint, bucket, f"without-1/{k}") == b"w%d" % k
        assert _get(cluster.endpoint, bucket, "before") == b"before"
        assert cluster.balancer.stats.skipped[0] > skipped
    finally:
        cluster.start_node(1)
    assert cluster.running() == [1, 2, 3, 4]
    cluster.wait_healthy()
    assert _get(cluster.node_endpoint(1), bucket, "without-1/3") == b"w3"
    print(f"503 answers while node 1 was down: {len(busy)}")


def test_a_multipart_upload_is_completed_through_the_balancer(cluster: MinioCluster, bucket: str) -> None:
    """Pass: an upload begun at node 2, its parts sent to nodes 3 and 4, is completed through the balancer; the
    object has both parts and S3's multipart ETag (MD5 of the parts' MD5s, then the part count)."""
    parts = [secrets.token_bytes(5 << 20), secrets.token_bytes(1024)]
    pinned = {i: cluster.node_endpoint(i) for i in (2, 3, 4)}
    upload = _eventually(lambda: _client(pinned[2]).create_multipart_upload(Bucket=bucket, Key="mpu")["UploadId"])
    sent = []
    for number, (node, data) in enumerate(zip((3, 4), parts, strict=True), start=1):
        reply = _eventually(
            lambda node=node, number=number, data=data: _client(pinned[node]).upload_part(
                Bucket=bucket, Key="mpu", UploadId=upload, PartNumber=number, Body=data
            )
        )
        sent.append({"PartNumber": number, "ETag": reply["ETag"]})
    assert cluster.balancer is not None
    connections = sum(cluster.balancer.stats.connections)
    done = _client(cluster.endpoint).complete_multipart_upload(
        Bucket=bucket, Key="mpu", UploadId=upload, MultipartUpload={"Parts": sent}
    )  # not retried: a second complete would meet NoSuchUpload (minio#13318)
    assert sum(cluster.balancer.stats.connections) == connections + 1
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-2"
    assert done["ETag"].strip('"') == expected
    assert _get(cluster.endpoint, bucket, "mpu") == b"".join(parts)


def test_a_paused_node_is_out_of_the_running_until_resumed(cluster: MinioCluster, bucket: str) -> None:
    """Pass: node 4 SIGSTOPped is not running; resumed, it serves again."""
    cluster.pause(4)
    try:
        assert cluster.running() == [1, 2, 3]
    finally:
        cluster.resume(4)
    assert cluster.running() == [1, 2, 3, 4]
    direct = cluster.direct_endpoint(4)
    assert wait_until(lambda: _serves_list(direct), 30, max_interval_s=0.5)


def _serves_list(endpoint: S3Endpoint) -> bool:
    try:
        return isinstance(_client(endpoint).list_buckets()["Buckets"], list)
    except Exception:  # not answering yet
        return False


# -- the service -------------------------------------------------------------------------------------------


def test_the_cluster_service_is_started_only_when_named() -> None:
    """``eosink services up`` with no names leaves the MinIO cluster out; named, it is chosen."""
    from eosink.services import cli

    assert "minio-cluster" not in cli.selected([], secure=False)
    assert cli.selected(["minio-cluster"], secure=False) == ["minio-cluster"]


def test_the_cluster_as_a_service_restarts_a_killed_node_through_its_control_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``eosink services up|check|down minio-cluster`` in a subprocess work; through the control socket node 2 is
    SIGKILLed, a put through the balancer works without it, and it starts again; down leaves no node running, and a
    control call after it says the supervisor is not running."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from eosink.errors import ServiceError
    from eosink.services._process import Proc
    from eosink.services.minio_cluster_service import PIDS, MinioClusterControl, MinioClusterService

    shared = os.environ.get("EOSINK_CACHE")
    cache = Path(tempfile.mkdtemp(prefix="eosink-mc-"))  # short: the control socket's path must fit
    monkeypatch.setenv("EOSINK_CACHE", str(cache))
    env = {**os.environ, "EOSINK_CACHE": str(cache)}
    if shared and (Path(shared) / "services" / "minio").is_dir():  # MinIO already built
        (cache / "services").mkdir(parents=True)
        os.symlink(Path(shared) / "services" / "minio", cache / "services" / "minio")

    def services(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "eosink.cli", "services", *args, "minio-cluster"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400, check=False)

    service = MinioClusterService()
    try:
        up = services("up")
        assert up.returncode == 0, up.stderr
        check = services("check")
        assert check.returncode == 0, check.stdout + check.stderr
        assert "ok    minio-cluster: nodes [1, 2, 3, 4] healthy" in check.stdout, check.stdout
        endpoint = service.endpoint()
        assert endpoint.secret_key not in repr(endpoint) + services("status").stdout
        control = MinioClusterControl(endpoint)
        assert oct(os.stat(endpoint.control).st_mode & 0o777) == "0o600"
        assert control.running() == control.nodes == [1, 2, 3, 4]
        supervisor = service.pid()
        control.kill(2)
        assert control.running() == [1, 3, 4]
        _create_bucket(endpoint, "svc")
        _put(endpoint, "svc", "k", b"without-2")
        control.start_node(2)
        control.wait_healthy()
        assert _get(control.node_endpoint(2), "svc", "k") == b"without-2"
        assert control.proxy(2).stats.connections >= 1
        recorded = json.loads((service.data / PIDS).read_text())  # node 2's new process too
        nodes = [Proc(int(pid), int(start)) for pid, start in recorded.values()]
        assert len(nodes) == 4 and all(node.alive() for node in nodes)
        with pytest.raises(ServiceError, match="Unknown operation 'close'"):
            control.request("close")
        down = services("down")
        assert down.returncode == 0, down.stderr
        assert supervisor is not None and not is_alive(supervisor)
        assert not any(node.alive() for node in nodes)
        with pytest.raises(ServiceError, match="not running"):
            control.running()
    finally:
        services("down")
        shutil.rmtree(cache, ignore_errors=True)
