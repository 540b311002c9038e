"""What the two sides of HdfsSink take from its core (``sink.py``), declared so that each type-checks alone."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager

from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs.config import HdfsConfig
from eosink.stores.hdfs import Fs

__all__ = ["_SinkBase"]


class _SinkBase:
    config: HdfsConfig
    fs: Fs

    @property
    def root(self) -> str:
        raise NotImplementedError

    def _errors(self, what: str) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _ensure_target(self) -> None:
        raise NotImplementedError

    def _own(self) -> str:
        raise NotImplementedError

    def _pending(self, app_id: str, batch_id: int | None = None) -> str:
        raise NotImplementedError

    def _staging(self, app_id: str, batch_id: int | None = None) -> str:
        raise NotImplementedError

    def _final(self, app_id: str, batch_id: int) -> str:
        raise NotImplementedError

    def _target_layout(self) -> L.Layout:
        raise NotImplementedError

    def _check_epoch(self, app_id: str, epoch: int, what: str) -> None:
        raise NotImplementedError

    def _target_schema(self) -> list[list[str]] | None:
        raise NotImplementedError

    def _store_schema(self, schema: Sequence[Sequence[str]]) -> None:
        raise NotImplementedError
