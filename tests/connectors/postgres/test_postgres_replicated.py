"""PostgresSink on a replicated PostgreSQL that fails over: a primary, a synchronous and an asynchronous standby.

Against the ``postgres-replicated`` service (``eosink services up postgres-replicated``), through the
multi-host conninfo, every node behind a fault proxy of its own. The contract suite's failover
cases (a lost COMMIT reply across a failover; batches an asynchronous failover dropped, caught at
the next commit) run in make test; the whole suite on the cluster and the connector's own
failover tests in test-full. A reader that shares no client code with the sink (a plain psycopg
connection to the current primary) checks every row.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres.admin import PostgresAdmin
from eosink.connectors.postgres.testing import ReplicatedPostgresHarness, reassemble
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.contracts import contract_tests
from eosink.errors import AmbiguousCommitError, CommittedWorkLostError, FencedError, TransientError
from eosink.services.postgres_cluster import ReplicatedCluster

HARNESS = ReplicatedPostgresHarness()
APP = "app_replicated"
BATCH = pa.RecordBatch.from_pylist([{"id": i, "name": f"n{i}"} for i in range(5)])

# make test runs the suite's failover cases (Makefile: -k 'failover or not TestReplicatedPostgresContract');
# test-full the whole suite on the cluster.
TestReplicatedPostgresContract = contract_tests(HARNESS, name="TestReplicatedPostgresContract")


@pytest.fixture
def cluster() -> Iterator[ReplicatedCluster]:
    """The running cluster, put back together after the test (every node a streaming standby but the primary)."""
    found = HARNESS.cluster()
    yield found
    reassemble(found)
    HARNESS.forget_admin()


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:10]
    made = {"table": f"rpl_{tag}", "ctl": f"rpl_{tag}_ctl"}
    yield made
    HARNESS.forget_admin()
    from psycopg import sql

    HARNESS.drop(made["ctl"], [sql.Identifier(made["table"])])


def _config(names: dict[str, str], **options: Any) -> PostgresConfig:
    return PostgresConfig(
        HARNESS.endpoint().url, table=names["table"], control_schema=names["ctl"], create_table=True, **options
    )


def _prepare(sink: PostgresSink, batch_id: int, epoch: int) -> list[Committable]:
    task = TaskRef(BatchRef(APP, batch_id), epoch, 0, uuid.uuid4().hex[:16])
    txn = sink.begin(task)
    sink.write(txn, BATCH)
    return [sink.pre_commit(txn)]


def _bundle(batch_id: int, epoch: int, committables: list[Committable], follows: int | None) -> Bundle:
    ids = tuple(c.id for c in committables)
    return Bundle(BatchRef(APP, batch_id), epoch, Fingerprint(), ids, None, "txid-check", follows)


def _rows(names: dict[str, str]) -> int:
    with psycopg.connect(HARNESS.endpoint().url, autocommit=True) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{names["table"]}"').fetchone()
    return int(row[0]) if row else 0


@pytest.mark.full
def test_a_zombie_old_primary_is_never_written_and_status_names_it(
    cluster: ReplicatedCluster, names: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Split brain: the primary is paused past a promotion and resumed; it still takes writes, on the old timeline.

    Pass: a sink made afterwards writes to the promoted server (newest timeline), never the zombie, and
    warns naming it; a commit begun on the zombie's connection before the promotion is settled on the
    new primary (never taken as committed); ``eosink status`` lists the zombie as such; nothing the
    zombie was sent is visible on the new primary.
    """
    caplog.set_level(logging.WARNING, logger="eosink.postgres")
    sink = PostgresSink(_config(names))
    epoch = sink.fence(APP)
    first = _prepare(sink, 0, epoch)
    sink.commit(BatchRef(APP, 0), first, _bundle(0, epoch, first, None))
    old = cluster.primary()
    promoted = next(n.name for n in cluster.status().nodes if n.role == "standby" and n.sync_state == "sync")
    cluster.wait_replayed(promoted)
    cluster.pause(old)
    cluster.promote(promoted)
    cluster.resume(old)
    assert {n.name: n.role for n in cluster.status().nodes}[old] == "primary", "the zombie must still take writes"
    fresh = PostgresSink(_config(names))
    batch1 = _prepare(fresh, 1, epoch)
    fresh.commit(BatchRef(APP, 1), batch1, _bundle(1, epoch, batch1, 0))
    assert any("zombie" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    with psycopg.connect(cluster.direct_url(promoted), autocommit=True) as conn:
        bundles = conn.execute(f'SELECT batch_id FROM "{names["ctl"]}".bundles ORDER BY 1').fetchall()
    assert [b[0] for b in bundles] == [0, 1]
    status = PostgresAdmin(_config(names)).status()
    roles = {s.role for s in status.servers}
    assert "primary (zombie)" in roles and "primary" in roles, status.servers
    cluster.kill(old)


@pytest.mark.full
def test_an_epoch_a_failover_lost_cannot_be_handed_out_again(cluster: ReplicatedCluster, names: dict[str, str]) -> None:
    """Writer A fences on the primary; the asynchronous standby never receives it and is promoted.

    Pass: writer B, fenced on the new primary, gets an epoch above A's (the timeline's floor), so A's
    next commit is FencedError, not a second writer with the same epoch; B commits.
    """
    cluster.set_mode("async")
    a = PostgresSink(_config(names))
    a.fence(APP)
    standby = next(n.name for n in cluster.status().nodes if n.role == "standby" and n.sync_state != "sync")
    cluster.wait_replayed(standby)
    cluster.cut_link(standby)
    epoch_a = a.fence(APP)  # lost with the old primary
    committables_a = _prepare(a, 0, epoch_a)
    cluster.kill(cluster.primary())
    cluster.promote(standby)
    b = PostgresSink(_config(names))
    epoch_b = b.fence(APP)
    assert epoch_b > epoch_a, (epoch_a, epoch_b)
    a.close()
    with pytest.raises((FencedError, CommittedWorkLostError, AmbiguousCommitError, TransientError)) as refused:
        a.commit(BatchRef(APP, 0), committables_a, _bundle(0, epoch_a, committables_a, None))
    assert not isinstance(refused.value, TransientError) or "prepared" in str(refused.value)
    committables_b = _prepare(b, 0, epoch_b)
    b.commit(BatchRef(APP, 0), committables_b, _bundle(0, epoch_b, committables_b, None))
    assert _rows(names) == BATCH.num_rows


@pytest.mark.full
def test_setup_states_the_replication_promise_and_reconnects_after_a_failover(
    cluster: ReplicatedCluster, names: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Setup logs whether commits wait for a synchronous standby; a failover is logged when the sink reconnects.

    Pass: in sync mode setup says "synchronous replication", in async mode "asynchronous replication";
    after the sync standby is promoted (the primary killed), the same sink's next commit lands on the
    new primary within the commit policy's transient timeout and the change of server is logged.
    """
    caplog.set_level(logging.INFO, logger="eosink.postgres")
    sink = PostgresSink(_config(names))
    sink.setup(APP)
    assert any("synchronous replication" in r.getMessage() for r in caplog.records)
    cluster.set_mode("async")
    caplog.clear()
    PostgresSink(_config(names)).setup(APP)
    assert any("asynchronous replication" in r.getMessage() for r in caplog.records)
    cluster.set_mode("sync")
    epoch = sink.fence(APP)
    committables = _prepare(sink, 0, epoch)
    synchronous = next(n.name for n in cluster.status().nodes if n.sync_state == "sync")
    cluster.kill(cluster.primary())
    cluster.promote(synchronous)
    caplog.clear()
    from eosink.contracts._steps import settle_commit

    settle_commit(lambda: sink.commit(BatchRef(APP, 0), committables, _bundle(0, epoch, committables, None)))
    assert any("server changed" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert sink.commit_status(BatchRef(APP, 0), committables) is CommitStatus.COMMITTED
    assert _rows(names) == BATCH.num_rows
