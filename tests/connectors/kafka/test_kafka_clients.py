"""The sink's clients over many tasks: Spark unpickles the sink for every task, in reused Python workers."""

from __future__ import annotations

import pickle
import threading

from eosink.connectors.kafka import KafkaConfig, KafkaSink

from .conftest import HARNESS


def test_a_sink_unpickled_per_task_opens_no_client_per_task() -> None:
    """Each admin client runs an I/O thread: one per task would leak a thread and sockets per batch
    (nothing closes a sink after its task)."""
    task = pickle.dumps(KafkaSink(KafkaConfig(HARNESS.bootstrap(), topic="unused")))
    first = pickle.loads(task)
    first.current_epoch("app_clients")  # opens the process's client
    before = threading.active_count()
    for _ in range(20):
        sink = pickle.loads(task)
        assert sink.current_epoch("app_clients") == 0
        del sink  # as after a task: nothing closes the sink
    assert threading.active_count() <= before, [t.name for t in threading.enumerate()]
