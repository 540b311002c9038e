"""The sink's clients over many tasks: Spark unpickles the sink for every task, in reused Python workers."""

from __future__ import annotations

import contextlib
import pickle
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient

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


@contextlib.contextmanager
def _silent_server() -> Iterator[str]:
    """A listener that accepts connections and never answers: a broker alive at TCP but paused or hung."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("client", ["eosink", pytest.param("stock", marks=pytest.mark.full)])
def test_a_silent_bootstrap_server_costs_one_turn_not_the_bootstrap(
    client: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The silent server is tried first, the real broker next. eosink's clients give it a share of the bootstrap
    timeout and bootstrap at the broker; negative control, kafka-python's own client waits for it until the
    timeout and gives up."""
    from kafka.errors import KafkaTimeoutError
    from kafka.net import manager

    picks: list[str] = []
    with _silent_server() as silent:

        def silent_first(brokers: list[Any]) -> Any:
            """kafka-python's random pick of a bootstrap server: the silent one, then the others in turn."""
            ordered = sorted(brokers, key=lambda b: f"{b.host}:{b.port}" != silent)
            chosen = ordered[len(picks) % len(ordered)]
            picks.append(f"{chosen.host}:{chosen.port}")
            return chosen

        monkeypatch.setattr(manager.random, "choice", silent_first)
        config = KafkaConfig([silent, HARNESS.bootstrap()], topic="unused")
        kwargs = config.client_kwargs(client_id="eosink-turns", bootstrap_timeout_ms=6_000)
        if client == "stock":
            kwargs.pop("kafka_client")
            with pytest.raises(KafkaTimeoutError):
                KafkaAdminClient(**kwargs)
            assert picks == [silent], picks
            return
        admin = KafkaAdminClient(**kwargs)
        try:
            assert picks[:2] == [silent, HARNESS.bootstrap()], picks
            assert admin.describe_cluster()["brokers"]
        finally:
            admin.close()
