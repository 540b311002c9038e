"""Spark queries into a replicated PostgreSQL that fails over at each step of a batch's commit.

A private :class:`~eosink.services.postgres_cluster.PostgresCluster` per module: a primary, a
synchronous and an asynchronous standby, every client and replication link behind a fault proxy.
The driver (``sink_driver.py --sink postgres``) writes through the cluster's multi-host conninfo
(``target_session_attrs=read-write``). Each test freezes the driver at a step of batch 1 (a fault
point with the ``stop`` action: SIGSTOP of its whole session), fails the cluster over (the primary
SIGKILLed, a standby promoted), and thaws the driver, which reconnects to the new primary.

* With a synchronous standby every case ends exact, whatever step the failover hits.
* With an asynchronous standby the server itself may drop acknowledged commits. A batch whose reply
  was lost is settled from the new primary's tables (never from a transaction id the old primary
  issued, which the new one hands out again); a batch committed, acknowledged and then dropped stops
  the query at the next batch with CommittedWorkLostError, and ``eosink recover --rewind`` lands it
  exactly once. Never silent.

A reader that shares no client code with the sink (psycopg on the current primary) checks every
row; its negative control is the old resolution (``pg_mutants.XidTrustingPostgresSink``), whose
silent loss the same check must report. make test runs the asynchronous failover at the batch's
commit (its reply lost) under 2pc and txid-check; test-full every step x strategy x mode.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from eosink._procs import is_stopped, signal_session
from eosink.connectors.postgres.testing import reassemble
from eosink.services.postgres_cluster import PostgresCluster

from .conftest import assert_clean, finish_with_restarts, rewind_batch_1, wait_for
from .test_postgres_pipeline import PgPipeline

pytestmark = pytest.mark.spark

ATOMIC = ("2pc", "txid-check")
STRATEGIES = ("2pc", "txid-check", "idempotent")
TRANSACTIONS_AFTER_PROMOTION = 300
"""Transactions the new primary runs before the driver reaches it: it hands out again the ids the old one gave."""


@pytest.fixture(scope="module")
def pg_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresCluster]:
    with PostgresCluster(tmp_path_factory.mktemp("pg-cluster")) as cluster:
        yield cluster


@pytest.fixture
def cluster(pg_cluster: PostgresCluster) -> Iterator[PostgresCluster]:
    """The module's cluster, put back together after each test (a primary, two streaming standbys, sync mode)."""
    yield pg_cluster
    reassemble(pg_cluster)


@pytest.fixture
def rp(tmp_path: Path, driver_java_opts: str, cluster: PostgresCluster) -> Iterator[PgPipeline]:
    tag = uuid.uuid4().hex[:10]
    pipeline = PgPipeline(
        tmp_path,
        java_opts=driver_java_opts,
        url=cluster.url,
        table=f"sparkrpl_{tag}",
        control_schema=f"sparkrpl_{tag}_ctl",
    )
    yield pipeline
    pipeline.close()


def _standby(cluster: PostgresCluster, mode: str) -> str:
    """The standby a failover promotes: the synchronous one, or (async) the other."""
    nodes = [n for n in cluster.status().nodes if n.role == "standby"]
    sync = [n.name for n in nodes if n.sync_state == "sync"]
    other = [n.name for n in nodes if n.sync_state != "sync"]
    return (sync or other)[0] if mode == "sync" else (other or sync)[0]


def _stop_at(p: PgPipeline, faults: str, point: str) -> Any:
    proc = p.start(faults)
    wait_for(lambda: point in p.fired(), 240, f"{point} to fire")
    wait_for(lambda: is_stopped(proc.pid), 30, "the driver to stop")
    return proc


def _before_commit(strategy: str) -> str:
    """The fault point just before the batch's commit: after Spark's commit log (2pc) or the manifest."""
    return "F5" if strategy == "2pc" else "F4"


def _promote_behind_a_refusing_proxy(cluster: PostgresCluster, standby: str) -> None:
    """Promote ``standby`` while its clients are refused; run transactions there first, as other writers would."""
    proxy = cluster.proxy(standby)
    proxy.refuse()
    try:
        cluster.promote(standby)
        with psycopg.connect(cluster.direct_url(standby), autocommit=True) as conn:
            for _ in range(TRANSACTIONS_AFTER_PROMOTION):
                conn.execute("SELECT pg_current_xact_id()")
    finally:
        proxy.passthrough()


def _reply_lost_then_failover(cluster: PostgresCluster, p: PgPipeline, strategy: str, mode: str) -> Any:
    """The issue's sequence: batch 1's COMMIT reaches the primary, its reply is lost; the primary dies; a
    standby that (async) received batch 1's prepared work but not its commit is promoted. The driver, thawed
    before the cut, resolves the batch against the new primary; returns its process."""
    cluster.set_mode(mode)  # type: ignore[arg-type]
    point = _before_commit(strategy)
    proc = _stop_at(p, f"{point}@1:stop", point)
    standby = _standby(cluster, mode)
    cluster.wait_replayed(standby)
    if mode == "async":
        cluster.cut_link(standby)  # it stops here: the commit below never reaches it
    old = cluster.primary()
    proxy = cluster.proxy(old)
    proxy.cut_after_request(b"COMMIT\x00")
    signal_session(proc.pid, signal.SIGCONT)
    assert proxy.wait_for_cut(120), "batch 1's COMMIT never went out"
    cluster.kill(old)
    _promote_behind_a_refusing_proxy(cluster, standby)
    return proc


@pytest.mark.parametrize("strategy", ATOMIC)
def test_an_async_failover_that_loses_the_commit_reply_is_settled_from_the_new_primary(
    rp: PgPipeline, cluster: PostgresCluster, strategy: str
) -> None:
    """Issue 58: batch 1's COMMIT reply is lost; the asynchronous standby, which has batch 1's participant
    work but not its commit, is promoted and hands out 300 transaction ids before the driver reaches it.

    Pass: the driver settles batch 1 from the new primary's tables (PREPARED, then commits it again) and
    finishes cleanly; every input row once, one bundle per batch of Spark's commit log, nothing in doubt.
    """
    _reply_lost_then_exact(cluster, rp, strategy, "async")


@pytest.mark.full
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_sync_failover_that_loses_the_commit_reply_is_exact(
    rp: PgPipeline, cluster: PostgresCluster, strategy: str
) -> None:
    """The same with a synchronous standby promoted: it holds the commit. Pass: clean finish, exact."""
    _reply_lost_then_exact(cluster, rp, strategy, "sync")


def _reply_lost_then_exact(cluster: PostgresCluster, rp: PgPipeline, strategy: str, mode: str) -> None:
    rp.variant = strategy
    proc = _reply_lost_then_failover(cluster, rp, strategy, mode)
    assert_clean(rp.finish(proc))
    rp.assert_exact()


@pytest.mark.full
def test_negative_control_the_old_resolution_loses_the_batch_and_the_check_says_so(
    rp: PgPipeline, cluster: PostgresCluster
) -> None:
    """The check's teeth: the same sequence under txid-check with the sink as it was (pg_xact_status of the
    remembered id, no predecessor check). Pass: the driver finishes cleanly, as it did, and the check
    reports batch 1's rows lost."""
    rp.variant = "txid-check"
    rp.extra_env = {"EOSINK_TEST_SINK_CLASS": "pg_mutants:XidTrustingPostgresSink"}
    proc = _reply_lost_then_failover(cluster, rp, "txid-check", "async")
    assert_clean(rp.finish(proc))
    lost = rp.expected() - rp.found()
    assert lost, "the old resolution must lose batch 1 here, or this control proves nothing"
    with pytest.raises(AssertionError, match="lost="):
        rp.assert_exact()


# Steps of batch 1 the failover hits, the driver frozen there: mid-write (before PREPARE), after
# pre_commit (after PREPARE), just before the commit, and after COMMIT PREPARED (before the move).
STEPS = {"mid-write": "F2", "prepared": "F3", "before-commit": None, "commit-prepared": "F6"}


@pytest.mark.full
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("step", list(STEPS))
def test_a_failover_at_each_step_of_the_commit_is_exact(
    rp: PgPipeline, cluster: PostgresCluster, strategy: str, step: str, mode: str
) -> None:
    """The driver frozen at ``step`` of batch 1; the primary SIGKILLed, a standby promoted (async: after its
    link was cut at that step, so it lacks nothing acknowledged); the driver thawed.

    Pass: the driver finishes, or stops with an eosink error and a restart finishes; exact, nothing in doubt.
    """
    point = STEPS[step] or _before_commit(strategy)
    if strategy == "idempotent" and point == "F6":
        pytest.skip("idempotent commits no prepared transaction: F6 is not on its path")
    rp.variant = strategy
    cluster.set_mode(mode)  # type: ignore[arg-type]
    proc = _stop_at(rp, f"{point}@1:stop", point)
    standby = _standby(cluster, mode)
    cluster.wait_replayed(standby)
    if mode == "async":
        cluster.cut_link(standby)
    cluster.kill(cluster.primary())
    cluster.promote(standby)
    signal_session(proc.pid, signal.SIGCONT)
    finish_with_restarts(rp, proc)
    rp.assert_exact()


@pytest.mark.full
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_batch_an_async_failover_dropped_stops_the_query_and_a_rewind_lands_it(
    rp: PgPipeline, cluster: PostgresCluster, strategy: str
) -> None:
    """Batch 1 committed and acknowledged by the primary after the asynchronous standby's link was cut; the
    primary dies and that standby is promoted: the server dropped an acknowledged batch.

    Pass: the query stops at batch 2 with CommittedWorkLostError naming batch 1 and the rewind, never
    silently; after ``eosink recover --rewind --yes`` the restart lands every row exactly once.
    """
    rp.variant = strategy
    cluster.set_mode("async")
    point = _before_commit(strategy)
    proc = _stop_at(rp, f"{point}@1:stop,F8@1:stop", point)
    standby = _standby(cluster, "async")
    cluster.wait_replayed(standby)
    cluster.cut_link(standby)
    signal_session(proc.pid, signal.SIGCONT)
    wait_for(lambda: "F8" in rp.fired(), 240, "batch 1 to be committed (F8)")
    wait_for(lambda: is_stopped(proc.pid), 30, "the driver to stop after batch 1's commit")
    cluster.kill(cluster.primary())
    cluster.promote(standby)
    signal_session(proc.pid, signal.SIGCONT)
    stopped = rp.finish(proc)
    assert stopped.returncode == 3 and stopped.error_kind == "CommittedWorkLostError", stopped.stderr[-4000:]
    assert "Batch 1 of app_id" in stopped.stderr and "--rewind" in stopped.stderr
    cli = [
        *("recover", "--sink", "postgres", "--conninfo-env", "EOSINK_TEST_PG_URL", "--table", rp.table),
        *("--control-schema", rp.control_schema, "--app-id", rp.app_id, "--checkpoint", str(rp.checkpoint), "--rewind"),
    ]
    rewind_batch_1(rp.checkpoint, cli, {**os.environ, "EOSINK_TEST_PG_URL": rp.url})
    assert_clean(rp.run())
    rp.assert_exact()


@pytest.mark.full
def test_split_brain_the_resumed_old_primary_takes_nothing(rp: PgPipeline, cluster: PostgresCluster) -> None:
    """The primary paused (SIGSTOP) while the driver waits before batch 1's commit, the synchronous standby
    promoted, the old primary resumed: two read-write servers, on timelines N and N+1.

    Pass: the driver commits on the newest timeline only and finishes; exact on the new primary; the resumed
    zombie holds no bundle of batch 1 or later.
    """
    rp.variant = "txid-check"
    proc = _stop_at(rp, "F4@1:stop", "F4")
    old = cluster.primary()
    standby = _standby(cluster, "sync")
    cluster.wait_replayed(standby)
    cluster.pause(old)
    cluster.promote(standby)
    cluster.resume(old)
    signal_session(proc.pid, signal.SIGCONT)
    assert_clean(rp.finish(proc))
    with psycopg.connect(cluster.direct_url(old), autocommit=True) as zombie:
        found = zombie.execute(
            sql.SQL("SELECT coalesce(max(batch_id), -1) FROM {}").format(sql.Identifier(rp.control_schema, "bundles"))
        ).fetchone()
    assert found is not None and found[0] < 1, f"the zombie holds bundles up to batch {found}"
    cluster.kill(old)  # the checker reads through the multi-host conninfo, which the zombie would answer first
    rp.close()
    rp.assert_exact()
