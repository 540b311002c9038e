"""The reference sink's harness for the contract suite (also what the mutant sinks of eosink's own tests run under)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from eosink.connectors.reference import ReferenceSink
from eosink.contract import BatchRef, Bundle, Committable, Sink
from eosink.contracts import Failover, Namespace, SinkHarness


class ReferenceFailover(Failover):
    """A standby of the reference sink's SQLite file: a consistent copy taken when it stops following (SQLite's
    online backup), which replaces the file when it is promoted. The file has no network, so a commit's reply
    cannot be lost on the way: :meth:`commit_losing_reply` commits, and the case asks as if it had been."""

    def __init__(self, path: Path, make: Callable[[], ReferenceSink]) -> None:
        self.path = path
        self.standby = path.with_name(path.name + ".standby")
        self._make = make

    def make_sink(self) -> ReferenceSink:
        return self._make()

    def commit_losing_reply(
        self, sink: Sink[Any], batch: BatchRef, committables: Sequence[Committable], bundle: Bundle
    ) -> None:
        sink.commit(batch, committables, bundle)

    def stop_standby(self) -> None:
        with closing(sqlite3.connect(self.path)) as primary, closing(sqlite3.connect(self.standby)) as copy:
            primary.backup(copy)

    def promote_standby(self) -> None:
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        os.replace(self.standby, self.path)


class ReferenceHarness(SinkHarness):
    """A reference sink (or a subclass: ``sink_class``) on one SQLite file per namespace."""

    def __init__(self, *, atomic: bool = True, sink_class: type[ReferenceSink] = ReferenceSink) -> None:
        self.atomic = atomic
        self.sink_class = sink_class

    def make_sink(self, ns: Namespace) -> ReferenceSink:
        return self.sink_class(ns.path / "sink.db", atomic=self.atomic)

    def failover(self, ns: Namespace) -> ReferenceFailover:
        return ReferenceFailover(ns.path / "sink.db", lambda: self.make_sink(ns))

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        reader = ReferenceSink(ns.path / "sink.db")
        try:
            return reader.rows()
        finally:
            reader.close()
