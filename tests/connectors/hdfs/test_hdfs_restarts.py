"""The NameNode crashed and restarted in the middle of a batch, on a private MiniDFSCluster of the test's own.

A SIGKILL of the whole cluster (NameNode and DataNodes) between two steps of the protocol, then a
restart on the same data and ports: the NameNode replays its edit log, and the sink's client
reconnects. Work prepared before the crash must still commit, exactly once; work caught writing
must either complete whole or fail with a retryable error whose retry replaces it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.contract import BatchRef
from eosink.contracts._steps import bundle_for, canon, prepare, rows_for
from eosink.errors import TransientError
from eosink.participant import WritePlan, run_participant
from eosink.services.hdfs import HdfsServer

APP = "app_restart"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[HdfsServer]:
    made = HdfsServer(tmp_path / "hdfs")
    made.start()
    try:
        yield made
    finally:
        made.close()


def _committed(config: HdfsConfig) -> object:
    return canon(read_committed(config, APP).to_pylist())


def test_work_prepared_before_a_namenode_crash_commits_once_after_its_restart(server: HdfsServer) -> None:
    config = HdfsConfig(f"{server.endpoint.url}/target")
    sink = HdfsSink(config)
    sink.setup(APP)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    rows = [rows_for(APP, 0, p, 5) for p in range(2)]
    committables = [prepare(sink, batch, epoch, p, rows[p]) for p in range(2)]

    server.restart(crash=True)

    try:
        sink.commit(batch, committables, bundle_for(batch, epoch, committables))
    except (
        TransientError
    ):  # the first call may meet the NameNode still leaving safe mode: retry, as the coordinator does
        sink.commit(batch, committables, bundle_for(batch, epoch, committables))
    assert _committed(config) == canon(rows[0] + rows[1])
    assert sink.fetch_last_bundle(APP) is not None
    sink.close()


def test_a_participant_caught_writing_by_a_namenode_crash_fails_retryably_or_completes_whole(
    server: HdfsServer,
) -> None:
    """The cluster dies while a participant's file is open and half written. hdfs-native may carry the
    write over the restart (its client reconnects and the pipeline recovers), or the participant fails
    with TransientError and Spark retries it; either way the batch commits every row once."""
    import pyarrow as pa

    from eosink.contracts._mini import SCHEMA as CONTRACT_SCHEMA

    config = HdfsConfig(f"{server.endpoint.url}/target")
    sink = HdfsSink(config)
    sink.setup(APP)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    rows = rows_for(APP, 0, 0, 6)
    plan = WritePlan(sink, batch, epoch, None, True, False, 0)

    def chunks() -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pylist(rows[:3], schema=CONTRACT_SCHEMA)
        server.restart(crash=True)
        yield pa.RecordBatch.from_pylist(rows[3:], schema=CONTRACT_SCHEMA)

    try:
        committable = run_participant(plan, 0, chunks())
    except TransientError:
        committable = prepare(sink, batch, epoch, 0, rows)  # Spark's retry of the task: a new attempt
    assert committable is not None
    sink.commit(batch, [committable], bundle_for(batch, epoch, [committable]))
    assert _committed(config) == canon(rows)
    assert sink.recover(APP) == []  # nothing left in doubt
    sink.close()
