"""What both sides of :class:`~eosink.connectors.kafka.sink.KafkaSink` use from its core.

The sink is its core (``sink.py``: configuration, clients, error translation, fencing) plus a
participant side (``_write_side``) and a coordinator side (``_commit_side``). The core's members
that both sides use are declared here once, so that each side type-checks on its own.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from eosink.connectors.kafka._progress import ProgressView
from eosink.connectors.kafka.config import KafkaConfig

__all__ = ["_SinkBase"]


class _SinkBase:
    """Declarations only: ``KafkaSink`` defines every member."""

    config: KafkaConfig
    _view: ProgressView

    if TYPE_CHECKING:

        def _admin(self) -> Any:
            """This process's admin client (kafka-python's KafkaAdminClient), opened lazily."""

        def _errors(self, what: str) -> AbstractContextManager[None]:
            """kafka-python errors inside become eosink errors."""

        def current_epoch(self, app_id: str) -> int:
            """The newest writer epoch of ``app_id`` (0 before the first fence)."""

        def _check_epoch(self, app_id: str, epoch: int, what: str) -> None:
            """FencedError when a newer writer than ``epoch`` holds ``app_id``."""
