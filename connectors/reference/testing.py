"""The reference sink's harness for the contract suite (also what the mutant sinks of eosink's own tests run under)."""

from __future__ import annotations

from typing import Any

from eosink.connectors.reference import ReferenceSink
from eosink.contracts import Namespace, SinkHarness


class ReferenceHarness(SinkHarness):
    """A reference sink (or a subclass: ``sink_class``) on one SQLite file per namespace."""

    def __init__(self, *, atomic: bool = True, sink_class: type[ReferenceSink] = ReferenceSink) -> None:
        self.atomic = atomic
        self.sink_class = sink_class

    def make_sink(self, ns: Namespace) -> ReferenceSink:
        return self.sink_class(ns.path / "sink.db", atomic=self.atomic)

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        reader = ReferenceSink(ns.path / "sink.db")
        try:
            return reader.rows()
        finally:
            reader.close()
