"""What the two sides of DeltaSink take from its core (``sink.py``), declared so that each type-checks alone."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from eosink.connectors.delta.config import DeltaConfig
from eosink.contract import Committable

_T = TypeVar("_T")

if TYPE_CHECKING:
    from deltalake import DeltaTable

    from eosink.connectors.delta._rules import TableRules
    from eosink.connectors.delta._store import Store

__all__ = ["_SinkBase"]


class _SinkBase:
    config: DeltaConfig

    def _errors(self, what: str) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _table(self) -> DeltaTable | None:
        raise NotImplementedError

    def _bounded(self, call: Callable[[], _T], what: str) -> _T:
        raise NotImplementedError

    def _storage(self) -> Store:
        raise NotImplementedError

    def _check_epoch(self, table: DeltaTable | None, app_id: str, epoch: int, what: str) -> None:
        raise NotImplementedError

    def _raced(self, table: DeltaTable, exc: Exception, what: str) -> None:
        raise NotImplementedError

    def _columns(self, table: DeltaTable) -> dict[str, Any]:
        raise NotImplementedError

    def _rules(self, table: DeltaTable) -> TableRules:
        raise NotImplementedError

    def _partition_by(self, table: DeltaTable | None) -> tuple[str, ...]:
        raise NotImplementedError

    def _write_manifest(self, committable: Committable) -> None:
        raise NotImplementedError

    def _manifests(self, app_id: str, batch_id: int | None = None) -> str:
        raise NotImplementedError

    def _app_dir(self, app_id: str) -> str:
        raise NotImplementedError

    def _writing(self, app_id: str, batch_id: int | None = None, attempt: str | None = None) -> str:
        raise NotImplementedError

    def _write_json(self, path: str, doc: Any) -> None:
        raise NotImplementedError

    def _read_json(self, path: str) -> Any:
        raise NotImplementedError

    def _delete(self, path: str) -> None:
        raise NotImplementedError
