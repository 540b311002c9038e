"""The S3 sink on a four-node MinIO cluster (:class:`~eosink.services.minio_cluster.MinioCluster`: one erasure set
of eight drives, each node behind its own fault proxy, clients spread over them by a balancer) that loses a node
in the middle of a commit.

Every test is judged by :class:`~eosink.connectors.s3.audit.StoreReader` (pyarrow's S3 client; the sink writes
with boto3), polling while the batches run and after: no row lost or duplicated, none gone after it was read, no
batch torn.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from eosink.connectors.s3 import S3Config, S3Sink, committed_markers
from eosink.connectors.s3.audit import StoreReader, canonical
from eosink.connectors.s3.testing import S3Harness
from eosink.contract import BatchRef, TaskRef
from eosink.contracts._mini import VARIANTS, MemoryBatch, PatientDriver, batches_for
from eosink.errors import PreparedWorkLostError, TransientError
from eosink.services.minio_cluster import MinioCluster

pytestmark = pytest.mark.timeout(600)

APP = "cluster-app"
COMPLETE = re.compile(rb"^POST [^ ]*[?&]uploadId=")
"""A CompleteMultipartUpload request (an UploadPart is a PUT with the same parameter)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioCluster]:
    with MinioCluster(Path(tmp_path_factory.mktemp("minio-cluster"))) as made:
        yield made


@pytest.fixture
def config(cluster: MinioCluster) -> Iterator[S3Config]:
    """A fresh prefix, through the balancer, on a cluster that can lose a node; every node running again
    afterwards."""
    cluster.wait_can_lose_a_node()
    yield S3Harness("eosink-cluster", endpoint=cluster.endpoint).config(f"c-{uuid.uuid4().hex[:10]}")
    for node in sorted(cluster.nodes):
        cluster.proxy(node).passthrough()
        if node not in cluster.running():
            cluster.start_node(node)


def _reader(cluster: MinioCluster, config: S3Config) -> StoreReader:
    ep = cluster.endpoint
    return StoreReader(ep.endpoint_url, ep.access_key, ep.secret_key, config.bucket, config.prefix).start()


def _expected(work: Sequence[MemoryBatch]) -> Counter[str]:
    return Counter(canonical(row) for batch in work for row in batch.rows)


DOWN_S = 8.0
"""How long the killed node stays down (the fault's length, not a synchronisation)."""


def fail_where_cut(
    cluster: MinioCluster, failed: list[int], *, kill: bool, wait_s: float = 60.0, applied: bool = False
) -> threading.Thread:
    """A thread that waits (at most ``wait_s``) for a node's proxy to cut a request armed from now on; then
    disarms every proxy, notes the node in ``failed`` and, ``kill``, SIGKILLs it and starts it again
    :data:`DOWN_S` later. The kill comes as the request is forwarded, or once the node's reply to it arrived
    (``applied``; the proxy then cuts the request's connection).

    A proxy counts its cuts from its start, and the cluster serves a whole module: only cuts made after the
    thread started count (an earlier test's would make it kill a node at once, before any request)."""
    proxies = {node: cluster.proxy(node) for node in sorted(cluster.nodes)}
    before = {node: proxy.stats.cuts for node, proxy in proxies.items()}

    def watch() -> None:
        for _ in range(int(wait_s * 100)):
            cut = [node for node, proxy in proxies.items() if proxy.stats.cuts > before[node]]
            if cut:
                if applied:
                    assert proxies[cut[0]].wait_for_cut(wait_s), f"node {cut[0]} never answered the cut request"
                for proxy in proxies.values():
                    proxy.passthrough()
                failed.append(cut[0])
                if kill:
                    cluster.kill(cut[0])
                    threading.Event().wait(DOWN_S)
                    cluster.start_node(cut[0])
                return
            threading.Event().wait(0.01)

    thread = threading.Thread(target=watch, name="fail-where-cut", daemon=True)
    thread.start()
    return thread


def _node_killed_at_complete(
    cluster: MinioCluster, config: S3Config, tmp_path: Path, *, applied: bool, participants: int
) -> tuple[list[MemoryBatch], BaseException | None]:
    """2pc batches 0-2 of ``participants`` objects each, batch 0 run first; then the first CompleteMultipartUpload
    to reach a node (batch 0's, whose 2pc commit may come only now, or batch 1's) has that node SIGKILLed (its reply
    never comes) and started again :data:`DOWN_S` later: once it has applied the complete (``applied``), or as the
    complete reaches it. The batches, and the error the run stopped with."""
    variant = next(v for v in VARIANTS if v.id == "2pc")
    driver = PatientDriver(tmp_path, variant, config, S3Sink, APP)
    work = batches_for(variant, 3, participants=participants)
    killed: list[int] = []
    stopped: BaseException | None = None
    try:
        driver.run(work[:1])
        watcher = fail_where_cut(cluster, killed, kill=True, applied=applied)
        for node in cluster.nodes:
            cluster.proxy(node).cut_after_request(COMPLETE, wait_for_reply=applied)
        try:
            driver.run(work)
        except (PreparedWorkLostError, TransientError) as exc:
            stopped = exc
        watcher.join(timeout=120)
        assert len(killed) == 1 and not watcher.is_alive(), killed
    finally:
        driver.close()
    return work, stopped


def test_a_node_killed_once_it_applied_complete_multipart_upload_under_2pc_is_exact(
    cluster: MinioCluster, config: S3Config, tmp_path: Path
) -> None:
    """Batches of one object each; a batch's CompleteMultipartUpload is applied by a node, which is SIGKILLed
    before its reply leaves (started again 8 s later). Pass: the sink settles the object from what the store
    holds (a repeated complete answers ``NoSuchUpload`` through another node: a HEAD of the object), writes the
    marker, the later batches commit, and the reader finds every row once with no incomplete upload left on any node.

    One object per batch: a node killed while it applies a complete can lose that upload (see the next test),
    and with several objects another one's complete may be in progress on the node this one reached."""
    reader = _reader(cluster, config)
    work, stopped = _node_killed_at_complete(cluster, config, tmp_path, applied=True, participants=1)
    assert stopped is None, stopped
    verdict = reader.verdict(_expected(work))
    assert not verdict.problems, verdict
    assert verdict.rows == verdict.listed == sum(len(b.rows) for b in work), verdict
    assert cluster.incomplete_uploads(config.bucket, config.prefix) == []


@pytest.mark.full
def test_a_node_killed_while_it_applies_complete_multipart_upload_is_exact_or_a_loud_loss(
    cluster: MinioCluster, config: S3Config, tmp_path: Path
) -> None:
    """Batches of three objects, completed concurrently; the node that a batch's first complete reaches is
    SIGKILLed as the request arrives (started again 8 s later), so any complete on it may be half applied.

    MinIO's complete is not atomic against the death of the node applying it: it deletes the parts' metadata
    (``part.N.meta``) on every drive before it renames the upload into the object, so a node killed between the
    two leaves an upload no complete accepts (``InvalidPart``) and no object, on every node for good; a kill
    during the rename can leave both short of drives (every complete ``SlowDownWrite``, no object). No client
    can land that work. The second state is also what a cluster short of its write quorum answers, so the sink
    retries it (the run stops with TransientError when its retry window ends). Pass: every row once with no
    incomplete upload left (the kill fell elsewhere), or that TransientError with the batches before the refused
    one whole and nothing of it visible to the markers' readers (a plain listing shows those of its objects whose
    completes landed, as while any commit runs; a restart retries the rest), or
    the commit stops with PreparedWorkLostError naming the batch whose complete it was (after ``lost_after_s``),
    and the reader, which polled throughout, saw the batches before it whole and nothing of it or later ones;
    the rewind that lands such a batch again is tested in ``tests/spark/test_minio_cluster_pipeline.py``."""
    reader = _reader(cluster, config)
    work, stopped = _node_killed_at_complete(cluster, config, tmp_path, applied=False, participants=3)
    landed = work
    if isinstance(stopped, TransientError):  # both short of drives: every complete refused for the whole window
        assert "SlowDownWrite" in str(stopped), stopped
        marked = sorted(m.batch_id for m in committed_markers(config, APP))
        assert marked == list(range(len(marked))) and len(marked) < len(work), marked
        landed = work[: len(marked)]
    elif stopped is not None:  # batch 0's commit may come after the proxies are armed (2pc commits it later)
        lost = re.search(r"Batch (\d+) of app_id", str(stopped))
        assert lost is not None and int(lost.group(1)) in (0, 1) and "--rewind" in str(stopped), stopped
        landed = work[: int(lost.group(1))]
    verdict = reader.verdict(_expected(landed))
    assert not verdict.problems, verdict
    assert verdict.rows == sum(len(b.rows) for b in landed), verdict
    if isinstance(stopped, TransientError):  # stopped mid-commit: only the refused batch's objects may be listed
        assert verdict.rows <= verdict.listed <= verdict.rows + len(work[len(landed)].rows), verdict
    else:
        assert verdict.listed == verdict.rows, verdict
    if stopped is None:
        assert cluster.incomplete_uploads(config.bucket, config.prefix) == []


@pytest.mark.full
@pytest.mark.parametrize("intent", ["with its upload id", "key only (negative control)"])
def test_recovery_asked_through_a_node_that_was_down_finds_the_upload_created_meanwhile(
    cluster: MinioCluster, config: S3Config, intent: str
) -> None:
    """A 2pc attempt prepared (its upload incomplete) while node 2 was down; node 2 started again; recover() asked
    through node 2 alone. Pass: the intent names the upload's id, and recovery finds the attempt from it (node 2
    lists uploads from one drive of its own, which never saw this one). Negative control: the intent stripped
    to its key, as one whose writer died before adding the id; recovery through node 2 must then miss it,
    or the case shows nothing."""
    node = 2
    cluster.kill(node)
    sink = S3Sink(config)
    sink.setup(APP)
    batch = BatchRef(APP, 0)
    epoch = sink.fence(APP)
    txn = sink.begin(TaskRef(batch, epoch, 0, "a0", strategy="2pc"))
    sink.write(txn, pa.record_batch({"id": [1, 2, 3]}))
    committable = sink.pre_commit(txn)
    (key,) = (o["key"] for o in committable.payload["objects"])
    intent_key = sink.layout.intent_key(APP, key)
    admin = S3Harness(config.bucket, endpoint=cluster.endpoint).client()
    recorded = admin.get_object(Bucket=config.bucket, Key=intent_key)["Body"].read()
    assert recorded == f"{key}\n{committable.payload['objects'][0]['upload_id']}".encode(), recorded
    if intent != "with its upload id":
        admin.put_object(Bucket=config.bucket, Key=intent_key, Body=key.encode("utf-8"))
    cluster.start_node(node)

    through_node = S3Sink(S3Harness(config.bucket, endpoint=cluster.direct_endpoint(node)).config(config.prefix))
    found = [c.id for c in through_node.recover(APP)]
    if intent == "with its upload id":
        assert found == [committable.id]
    else:
        assert found == [], "node 2 listed the upload: this case no longer shows what the intent's id is for"
    sink.abort([committable])
    assert cluster.incomplete_uploads(config.bucket, config.prefix) == []
