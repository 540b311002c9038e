"""A kafka-python bootstrap that gives each listed server a turn, not the whole timeout.

kafka-python 3.0 bootstraps at one listed server picked at random and waits for it until the
bootstrap timeout. A broker that is alive at TCP but does not answer (paused, hung in a long GC,
behind a stalled proxy) then costs every new client its whole bootstrap timeout, one time in N,
although the other brokers would answer at once. :class:`TurnTakingClient` caps each bootstrap
connection at an equal share of that timeout (at least a second), so the next server gets its
turn. Passed as kafka-python's ``kafka_client`` to every producer and admin client the sink opens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafka.net.compat import KafkaNetClient
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector

__all__ = ["TurnTakingClient", "bootstrap_turn_ms"]

_MIN_TURN_MS = 1000


def bootstrap_turn_ms(servers: str | Sequence[str], timeout_ms: int) -> int:
    """How long one bootstrap attempt may wait for one of ``servers`` within ``timeout_ms``."""
    listed = servers.split(",") if isinstance(servers, str) else list(servers)
    count = len([s for s in listed if str(s).strip()])
    return timeout_ms if count <= 1 else max(_MIN_TURN_MS, timeout_ms // count)


class _TurnTakingManager(KafkaConnectionManager):  # type: ignore[misc]
    def __init__(self, net: Any, **configs: Any) -> None:
        super().__init__(net, **configs)
        timeout_ms = int(configs.get("bootstrap_timeout_ms", 30_000))
        self._turn_ms = bootstrap_turn_ms(self.config["bootstrap_servers"], timeout_ms)

    def get_connection(self, node_id: Any, timeout_ms: float | None = None, **kwargs: Any) -> Any:
        if timeout_ms is not None and str(node_id).startswith("bootstrap-"):  # kafka-python's bootstrap nodes
            timeout_ms = min(timeout_ms, self._turn_ms)
        return super().get_connection(node_id, timeout_ms=timeout_ms, **kwargs)


class TurnTakingClient(KafkaNetClient):  # type: ignore[misc]
    """kafka-python's network client with :class:`_TurnTakingManager` as its connection manager."""

    def __init__(self, **configs: Any) -> None:
        net = NetworkSelector(**configs)
        super().__init__(net=net, manager=_TurnTakingManager(net, **configs))
