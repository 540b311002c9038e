"""The NameNode crashed and restarted, or a DataNode died, in the middle of a batch, on a private
MiniDFSCluster of the test's own.

A SIGKILL of the whole cluster (NameNode and DataNodes) between two steps of the protocol, then a
restart on the same data and ports: the NameNode replays its edit log, and the sink's client
reconnects. Or one of the two DataNodes stops at once while participants write, and starts again
later. Work prepared before the crash must still commit, exactly once; work caught writing must
either complete whole or fail with a retryable error whose retry replaces it.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eosink._waiting import wait_until
from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs.testing import listed_rows
from eosink.contract import BatchRef, Committable
from eosink.contracts._steps import bundle_for, canon, prepare, rows_for
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import TransientError
from eosink.participant import WritePlan, run_participant
from eosink.services.hdfs import HdfsServer

APP = "app_restart"
_WAIT_S = 120.0
"""The bound on every wait of the DataNode test (the private cluster declares a silent DataNode dead in 12-17 s)."""
_WRITE_TIMEOUT_S = 30.0
"""The DataNode test's ``write_timeout_s``: a pipeline that the stopped DataNode stalls past it is a TransientError
(:func:`eosink.stores.hdfs.bounded`) well within ``_WAIT_S``, even for a write and then its hsync and close. At
the default (120 s), a stalled write outlived the test's own wait for its participant."""


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


@dataclass(frozen=True)
class _Share:
    """One participant's rows, as record batches; the DataNode stops once the first ``before`` are written."""

    chunks: tuple[tuple[dict[str, Any], ...], ...]
    before: int

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [row for chunk in self.chunks for row in chunk]

    def batches(self) -> Iterator[pa.RecordBatch]:
        for chunk in self.chunks:
            yield pa.RecordBatch.from_pylist(list(chunk), schema=CONTRACT_SCHEMA)


def _share(batch_id: int, participant: int, chunks: int, rows: int, before: int) -> _Share:
    """``chunks`` record batches of ``rows`` rows, each row carrying 2 KiB of random text: Parquet cannot
    shrink it, so every chunk of 1,000 rows puts 2 MiB on the way to the DataNodes."""
    start = batch_id * 1_000_000 + participant * 100_000
    made = tuple(
        tuple(
            {
                "id": start + c * rows + i,
                "name": base64.b64encode(os.urandom(1536)).decode(),
                "amount": float(i),
                "tag": f"b{batch_id}/p{participant}",
            }
            for i in range(rows)
        )
        for c in range(chunks)
    )
    return _Share(made, before)


def _write_while_a_datanode_stops(
    server: HdfsServer, plan: WritePlan, shares: dict[int, _Share], datanode: int
) -> dict[int, Committable | BaseException | None]:
    """Run every participant at once, each in a thread (as Spark runs a batch's tasks); stop ``datanode`` once
    each has written its first ``before`` record batches, then let them go on. What each returned or raised."""
    stopped = threading.Event()
    reached = {p: threading.Event() for p in shares}
    results: dict[int, Committable | BaseException | None] = {}

    def batches(p: int) -> Iterator[pa.RecordBatch]:
        for n, batch in enumerate(shares[p].batches()):
            if n == shares[p].before:
                reached[p].set()
                if not stopped.wait(_WAIT_S):
                    raise TimeoutError("the DataNode was not stopped")
            yield batch

    def participant(p: int) -> None:
        try:
            results[p] = run_participant(plan, p, batches(p))
        except BaseException as exc:  # judged by the test
            results[p] = exc

    threads = [threading.Thread(target=participant, args=(p,), daemon=True) for p in shares]
    for thread in threads:
        thread.start()
    try:
        assert wait_until(lambda: all(reached[p].is_set() or p in results for p in shares), _WAIT_S)
        assert all(event.is_set() for event in reached.values()), f"a participant ended early: {results}"
        server.stop_datanode(datanode)
    finally:
        stopped.set()
        for thread in threads:
            thread.join(_WAIT_S)
    assert not any(thread.is_alive() for thread in threads)
    return results


def _healthy(server: HdfsServer) -> bool:
    """Both DataNodes live, and no block short of its replicas (or with only corrupt ones)."""
    stats = server.namenode_stats()
    counts = ("NumDeadDataNodes", "UnderReplicatedBlocks", "CorruptBlocks", "MissingBlocks")
    return stats["NumLiveDataNodes"] == 2 and not any(stats[c] for c in counts)


def _placed_without(server: HdfsServer, capacity: int) -> bool:
    """Whether the NameNode has stopped placing blocks on the dead DataNode (its capacity left the total)."""
    stats = server.namenode_stats()
    return bool(stats["NumDeadDataNodes"] == 1 and stats["CapacityTotal"] < capacity * 3 // 4)


def test_participants_writing_when_a_datanode_dies_complete_whole_or_fail_retryably(server: HdfsServer) -> None:
    """DataNode 0 of the two stops, as a crash would, while two participants of one batch write: each has
    sent 4 MiB and more into a block open on both DataNodes, and writes 2 MiB more, hsyncs and closes
    afterwards. hdfs-native carries an open block over to the other DataNode (pipeline recovery: one
    replica left).

    Pass: each participant returns its committable or raises TransientError, nothing else, and a failed
    one leaves only its hidden attempt directory; nothing of the batch is visible before its commit; a new
    attempt of a failed participant succeeds once the NameNode has stopped placing blocks on the dead
    DataNode; the batch commits one attempt per participant and every row once, for readers of the batch
    records and for readers that list the directory; nothing is left in doubt (recover). After the
    DataNode's restart the NameNode has two live DataNodes and every block fully replicated again, a second
    batch commits, both batches read back whole, and the next fence removes failed attempts' directories."""
    config = HdfsConfig(f"{server.endpoint.url}/target", write_timeout_s=_WRITE_TIMEOUT_S)
    sink = HdfsSink(config)
    sink.setup(APP)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    plan = WritePlan(sink, batch, epoch, None, True, False, 0)
    shares = {p: _share(0, p, chunks=4, rows=1_000, before=3) for p in range(2)}  # 6 MiB before: 4 MiB sent
    assert wait_until(lambda: server.namenode_stats()["NumLiveDataNodes"] == 2, _WAIT_S)  # counts refreshed
    capacity = int(server.namenode_stats()["CapacityTotal"])

    caught = _write_while_a_datanode_stops(server, plan, shares, datanode=0)

    failed = {p: r for p, r in caught.items() if not isinstance(r, Committable)}
    for p, error in failed.items():
        assert isinstance(error, TransientError), f"participant {p} failed with {error!r}, not TransientError"
    assert listed_rows(config) == [] and read_committed(config, APP).num_rows == 0
    pending = sink._pending(APP, 0)
    hidden = [n for n in sink.fs.names(pending) if L.writing_epoch(n) is not None]
    assert len(hidden) == len(failed)  # a failed attempt is never prepared: only its hidden directory is left

    assert wait_until(lambda: _placed_without(server, capacity), _WAIT_S)
    committables: list[Committable] = []
    for p, share in shares.items():
        result = caught[p]
        if not isinstance(result, Committable):
            result = run_participant(plan, p, share.batches())  # Spark's retry: a new attempt of the task
        assert result is not None
        committables.append(result)
    sink.commit(batch, committables, bundle_for(batch, epoch, committables))

    rows = [row for share in shares.values() for row in share.rows]
    assert _committed(config) == canon(rows)
    assert canon(listed_rows(config)) == canon(rows)
    last = sink.fetch_last_bundle(APP)
    assert last is not None and last.committables == tuple(c.id for c in committables)
    tasks = [L.parse_task(c.id) for c in committables]
    assert sorted(t.participant for t in tasks if t is not None) == sorted(shares)  # one attempt each
    assert sink.recover(APP) == []

    server.start_datanode(0)
    assert wait_until(lambda: _healthy(server), _WAIT_S)  # the blocks written meanwhile got their second replica
    second = BatchRef(APP, 1)
    again = WritePlan(sink, second, epoch, None, True, False, 0)
    more = {p: _share(1, p, chunks=2, rows=500, before=0) for p in range(2)}
    done = [run_participant(again, p, share.batches()) for p, share in more.items()]
    made = [c for c in done if c is not None]
    sink.commit(second, made, bundle_for(second, epoch, made))
    rows += [row for share in more.values() for row in share.rows]
    assert _committed(config) == canon(rows)
    assert wait_until(lambda: _healthy(server), _WAIT_S)

    sink.fence(APP)  # the next run of the query
    assert not [n for n in sink.fs.names(pending) if L.writing_epoch(n) is not None]
    sink.close()
