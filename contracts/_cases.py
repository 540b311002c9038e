"""What every test class of the contract suite shares: the harness, disarmed fault points, a fresh namespace."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from eosink import faults
from eosink.contracts.harness import Namespace, SinkHarness

__all__ = ["HarnessCases"]


class HarnessCases:
    """A base for the suite's test classes: ``harness`` is the connector's; each case gets ``ns``."""

    harness: ClassVar[SinkHarness]

    @pytest.fixture(autouse=True)
    def _disarmed_faults(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        monkeypatch.delenv("EOSINK_FAULTS", raising=False)
        monkeypatch.delenv("EOSINK_FAULT_LOG", raising=False)
        faults.reset()
        yield
        faults.reset()

    @pytest.fixture
    def ns(self, tmp_path: Path) -> Iterator[Namespace]:
        """A fresh namespace for one case."""
        namespace = Namespace(f"eo{uuid.uuid4().hex[:10]}", tmp_path / "ns")
        namespace.path.mkdir()
        yield namespace
        self.harness.cleanup(namespace)
