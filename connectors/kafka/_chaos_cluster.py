"""The chaos harness's Kafka target on a three-node cluster (``eosink chaos --sink kafka --topology cluster``).

A private :class:`~eosink.services.kafka_cluster.KafkaCluster` (replication factor 3, ``min.insync.replicas=2``,
one transaction-state partition, so one node coordinates every transaction), each node behind a fault proxy of
this process. The job bootstraps at the proxies, so every request it sends can be cut or held. The cluster's
faults (:mod:`eosink.chaos.schedule`):

* a node SIGKILLed, the leader of a partition of the schedule's topic or the transaction coordinator; it stays
  down until the run ends (:meth:`heal` starts it again);
* a node SIGSTOPped past its session timeout (the controller fences it, its roles move) and resumed, a zombie
  with old metadata;
* the next ``EndTxn`` held at the coordinator past the job's request timeout, then delivered;
* the commit's ``EndTxn`` reply cut (the runner's ``commit-cut``, at whichever node coordinates).

The judge is the independent reader, :class:`~eosink.connectors.kafka.audit.CommittedReader` (confluent-kafka,
while eosink writes with kafka-python): it polls during the schedule, reads the rows the oracle checks at the
end, and reports torn batches (a bundle visible before all its rows) and hanging transactions (a last stable
offset still behind after two transaction timeouts) among the schedule's leftovers.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink.chaos.oracle import Row
from eosink.chaos.schedule import KAFKA_CLUSTER
from eosink.chaos.target import FollowingProxy, Names, Snapshot, key_of
from eosink.connectors.kafka._chaos import (
    BOOTSTRAP_VAR,
    DIRECT_VAR,
    JARS_VAR,
    PARTITIONS,
    TUNING_VAR,
    KafkaChaosTarget,
    progress_topic,
)
from eosink.errors import ServiceError

__all__ = ["KafkaClusterChaosTarget"]

REQUEST_TIMEOUT_MS = 4000
"""The job's clients give up on a request after 4 s, so that the held ``EndTxn`` outlasts its timeout."""
TRANSACTION_TIMEOUT_MS = 60_000
"""A transaction left open is aborted by its coordinator after 60 s."""
HOLD_S = 12.0
"""How long the held ``EndTxn`` waits at the coordinator's proxy: 8 s past the job's request timeout."""
PAUSE_S = 10.0
"""How long a paused node stays stopped: past the cluster's session timeout (6 s), so its roles move."""
SETTLE_S = 2 * TRANSACTION_TIMEOUT_MS / 1000
"""How long a last stable offset may stay behind after a schedule before it counts as a hanging transaction."""
ROLE_WAIT_S = 30.0
POLL_INTERVAL_S = 0.25


class KafkaClusterChaosTarget(KafkaChaosTarget):
    """Kafka on a private three-node cluster (see the module docstring)."""

    name = "kafka"
    cluster_faults = KAFKA_CLUSTER

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root)
        self.cluster: Any = None
        self._topic: str | None = None
        self._lock = threading.Lock()
        self._timers: dict[int, threading.Timer] = {}
        self._readers: dict[str, Any] = {}
        self._lister: Any = None

    # -- the cluster --------------------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.kafka_cluster import KafkaCluster
        from eosink.services.spark_jars import SparkJars

        SparkJars().fetch("kafka")
        self.cluster = self.dir.serve(lambda root: KafkaCluster(root / "kafka-cluster", txn_state_partitions=1))
        self.server = self.cluster

    def close(self) -> None:
        for reader in self._readers.values():
            with contextlib.suppress(Exception):
                reader.close()
        self._readers.clear()
        self._lister = None
        self._resume_all()
        super().close()
        self.cluster = None

    def restart(self, *, crash: bool) -> None:
        """The coordinator stopped (``crash``: SIGKILLed) and started again."""
        node = self.cluster.coordinator()
        (self.cluster.kill if crash else self.cluster.stop_node)(node)
        self.cluster.start_node(node)

    def address(self) -> tuple[str, int]:
        node = next(iter(self.cluster.nodes.values()))
        return "127.0.0.1", int(node.broker_port)

    def _direct(self) -> str:
        return str(self.cluster.direct_bootstrap)

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        from eosink.services.spark_jars import SparkJars

        tuning = {
            "producer_options": {"request_timeout_ms": REQUEST_TIMEOUT_MS},
            "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS,
        }
        return {
            BOOTSTRAP_VAR: str(self.cluster.bootstrap_servers),
            DIRECT_VAR: self._direct(),
            JARS_VAR: SparkJars().spark_conf("kafka")["spark.jars"],
            TUNING_VAR: json.dumps(tuning),
        }

    def fault_proxy(self) -> Any:
        """The proxy of whichever node coordinates transactions when a cut is armed."""
        nodes = self.cluster.nodes
        return FollowingProxy(
            lambda: [self.cluster.proxy(n) for n in nodes], lambda: self.cluster.proxy(self._node_of("coordinator"))
        )

    def heal(self) -> None:
        """Resume a paused node, start a killed one, and wait until every node leads and follows again."""
        self._resume_all()
        for node_id, node in self.cluster.nodes.items():
            if node.proc is None:
                self.cluster.start_node(node_id)
        topics = ["__transaction_state", *([self._topic] if self._topic else [])]
        for topic in topics:
            with contextlib.suppress(ServiceError):  # the schedule's topic may not exist yet
                self.cluster.wait_in_sync(topic, timeout_s=120)

    def _resume_all(self) -> None:
        with self._lock:
            timers, self._timers = self._timers, {}
        for node_id, timer in timers.items():
            timer.cancel()
            self.cluster.resume(node_id)

    # -- the cluster's faults -----------------------------------------------------------------------

    def kill_node(self, role: str) -> str:
        node = self._node_of(role)
        self.cluster.kill(node)
        return f"{role} node {node} SIGKILLed"

    def pause_node(self, role: str) -> str:
        node = self._node_of(role)
        self.cluster.pause(node)
        timer = threading.Timer(PAUSE_S, self._resume, args=(node,))
        timer.daemon = True
        with self._lock:
            self._timers[node] = timer
        timer.start()
        return f"{role} node {node} paused for {PAUSE_S:.0f} s"

    def _resume(self, node: int) -> None:
        with self._lock:
            if self._timers.pop(node, None) is None:
                return
        self.cluster.resume(node)

    def hold_end_txn(self) -> str:
        from eosink.services.kafka_cluster import kafka_request

        node = self._node_of("coordinator")
        self.cluster.proxy(node).hold_request(kafka_request("EndTxn"), HOLD_S)
        return f"next EndTxn held {HOLD_S:.0f} s at coordinator node {node}"

    def _node_of(self, role: str) -> int:
        """The running node that has ``role`` now; while that role sits on a node that is down (killed or paused
        by an earlier fault), wait for the controller to move it."""
        deadline = time.monotonic() + ROLE_WAIT_S
        seen = "no answer"
        while True:
            try:
                if role == "coordinator":
                    node = int(self.cluster.coordinator())
                else:
                    node = int(self.cluster.leader(self._topic or "", 0))
                if node in self.cluster.running():
                    return node
                seen = f"node {node}, which is down"
            except Exception as exc:  # a node down: its answer, or the metadata, may lag
                seen = f"{type(exc).__name__}: {exc}"
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"the chaos cluster named no running {role} within {ROLE_WAIT_S:.0f} s (last: {seen}).",
                    f"read the nodes' logs under {self.cluster.root}.",
                )
            time.sleep(0.5)

    # -- what the independent reader sees -----------------------------------------------------------

    def _listed(self) -> dict[str, int]:
        """The cluster's topics and their partition counts."""
        if self._lister is None:
            from confluent_kafka.admin import AdminClient

            self._lister = AdminClient({"bootstrap.servers": self._direct(), "log_level": 2})
        return {name: len(t.partitions) for name, t in self._lister.list_topics(timeout=10).topics.items()}

    def _reader(self, names: Names, listed: dict[str, int]) -> Any:
        """The independent reader of the schedule's topic (in as many partitions as it has: the plain baseline's
        Spark sink creates its topic with the cluster's default) and, where it exists, its bundles (the plain
        baseline keeps none)."""
        from eosink.connectors.kafka.audit import CommittedReader

        progress = progress_topic(names.control_schema)
        bundles = progress if progress in listed else None
        return CommittedReader(self._direct(), names.table, listed.get(names.table, PARTITIONS), bundles, names.app_id)

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll function reading with the independent reader: committed rows per batch and the app's bundles;
        None while the topics do not exist yet or a node's failure keeps the read from finishing."""
        self._topic = names.table
        last = [0.0]

        def poll() -> Snapshot | None:
            # Each read asks every partition's last stable offset: at most four a second, not the harness's twenty.
            time.sleep(max(0.0, last[0] + POLL_INTERVAL_S - time.monotonic()))
            last[0] = time.monotonic()
            reader = self._readers.get(names.table)
            try:
                if reader is None:
                    listed = self._listed()
                    if names.table not in listed or progress_topic(names.control_schema) not in listed:
                        return None
                    reader = self._readers[names.table] = self._reader(names, listed)
                reader.poll(timeout_s=5.0)
            except Exception:  # a node down or moving its roles: the next poll reads again
                return None
            counts: dict[int, int] = {}
            for value, n in reader.seen.items():
                batch = int(json.loads(value)["batch_id"])
                counts[batch] = counts.get(batch, 0) + n
            return Snapshot(counts, frozenset(reader.rows_by_bundle), reader="confluent-kafka")

        return poll

    def read_rows(self, names: Names) -> list[Row]:
        """Every committed row, read to the last stable offsets by a fresh independent reader."""
        listed = self._listed()
        if names.table not in listed:
            return []
        reader = self._reader(names, listed)
        try:
            reader.poll(timeout_s=60.0)
            values = [json.loads(v) for v, n in reader.seen.items() for _ in range(n)]
        finally:
            reader.close()
        return [
            (int(v["batch_id"]), key_of(v), int(v["running_sum"]), str(v["concat"]), int(v["n_tokens"])) for v in values
        ]

    def leftovers(self, names: Names) -> dict[str, int]:
        """The app's open transactions, and what the schedule's reader found: batches torn (a bundle read while
        fewer rows were) and partitions whose last stable offset stayed behind for two transaction timeouts."""
        found = super().leftovers(names)
        reader = self._readers.pop(names.table, None)
        if reader is None:
            return {**found, "torn_batches": 0, "hanging_transactions": 0}
        try:
            stuck = reader.stuck(SETTLE_S)
            reader.poll(timeout_s=60.0)
            torn = len(reader.torn)
            for text in reader.torn:  # the count goes into the report; what was seen, into the run's output
                print(f"    torn batch in {names.table}: {text}", file=sys.stderr, flush=True)
        finally:
            reader.close()
        return {**found, "torn_batches": torn, "hanging_transactions": len(stuck)}
