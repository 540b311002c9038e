"""Shared fixtures of the unit tests: a fake Spark checkpoint, in-memory batches and a "mini Spark".

Nothing here starts Spark. The fake checkpoint, the in-memory batches and the strategy
variants come from :mod:`eosink.contracts._mini` (shared with the contract suite);

* :class:`MiniSpark` runs batches through a coordinator in Spark's order (offsets, foreachBatch,
  commit log, then the 2PC commit), and restarts the "driver": a new Coordinator and a new sink
  object on the same files, replaying every batch whose ``commits/N`` is missing.

A "crash" is an :class:`~eosink.errors.InjectedFault` raised by a fault point; the crashed
coordinator object is dropped, as a dead driver would be.

tests/unit is not a package, and several conftest.py files may be loaded under the module name
``conftest``; so this module also registers itself as ``unit_conftest``, and test modules import
helpers with ``from unit_conftest import ...``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from eosink import faults
from eosink.connectors.reference import ReferenceSink
from eosink.contracts._mini import (  # noqa: F401 - re-exported to the unit tests
    BASE_TS_MS,
    FAST,
    NON_2PC,
    SCHEMA,
    VARIANTS,
    FakeCheckpoint,
    MemoryBatch,
    NoWatcherCoordinator,
    Variant,
    batches_for,
    canon,
    chunks,
    make_rows,
    wait_until,
)
from eosink.coordinator import CommitPolicy, Coordinator
from eosink.errors import InjectedFault

sys.modules.setdefault("unit_conftest", sys.modules[__name__])

APP = "payments"
SinkFactory = Callable[[Path], ReferenceSink]


# -- faults ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_crash_scope_left() -> Iterator[None]:
    """No test leaves a crash scope (``EOSINK_FAULT_SESSION``/``_PGID``) in the test process's environment.

    A scope naming the test run's own session or process group would make a later test's ``kill`` fault
    signal the whole run (make and every stage with it). Runs after monkeypatch has undone its changes.
    """
    before = {v: os.environ.get(v) for v in faults.CRASH_SCOPE_VARS}
    yield
    after = {v: os.environ.get(v) for v in faults.CRASH_SCOPE_VARS}
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    assert after == before, f"the test left a crash scope in the environment: {after} (use monkeypatch)"


@pytest.fixture(autouse=True)
def _no_faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with all fault points disarmed."""
    monkeypatch.delenv("EOSINK_FAULTS", raising=False)
    monkeypatch.delenv("EOSINK_FAULT_LOG", raising=False)
    faults.reset()
    yield
    faults.reset()


# -- strategies --------------------------------------------------------------------------------


@pytest.fixture(params=VARIANTS, ids=[v.id for v in VARIANTS])
def variant(request: pytest.FixtureRequest) -> Variant:
    """Each of the four strategy variants in turn."""
    return request.param  # type: ignore[no-any-return]


# -- the driver ----------------------------------------------------------------------------------


class MiniSpark:
    """Drives batches through a coordinator in Spark's order, and restarts the driver.

    Per batch: ``offsets/N``; ``coordinator.process(N, batch)`` (foreachBatch); ``commits/N``;
    for 2PC ``coordinator.commit_ready()`` (what the watcher does). ``run()`` processes every
    batch whose ``commits/N`` is missing, in order, as Spark does after a (re)start.
    """

    def __init__(
        self,
        tmp_path: Path,
        variant: Variant,
        batches: Sequence[MemoryBatch],
        *,
        sink_factory: SinkFactory = ReferenceSink,
        policy: CommitPolicy = FAST,
        checkpoint: FakeCheckpoint | None = None,
        app_id: str = APP,
    ) -> None:
        self.db = tmp_path / "sink.db"
        self.variant = variant
        self.batches = list(batches)
        self.sink_factory = sink_factory
        self.policy = policy
        self.ckpt = checkpoint or FakeCheckpoint(tmp_path / "checkpoint")
        self.app_id = app_id
        self.processed: list[int] = []
        self.coordinator = self.new_coordinator()

    def new_coordinator(self, checkpoint: FakeCheckpoint | None = None) -> Coordinator:
        """A fresh driver: a new sink object and a new coordinator on the same files."""
        ckpt = checkpoint or self.ckpt
        sink = self.sink_factory(self.db)
        return NoWatcherCoordinator(sink, self.app_id, self.variant.make(), ckpt.spark(), self.policy)

    @property
    def stats(self) -> Any:
        return self.coordinator.stats

    def run_batch(self, batch_id: int) -> None:
        self.ckpt.write_offsets(batch_id)
        self.processed.append(batch_id)
        self.coordinator.process(batch_id, self.batches[batch_id])
        self.ckpt.write_commit(batch_id)
        if self.variant.two_pc:
            self.coordinator.commit_ready()

    def pending(self) -> list[int]:
        return [n for n in range(len(self.batches)) if not self.ckpt.has_commit(n)]

    def run(self) -> None:
        """Process every batch Spark has not committed; then make sure recovery ran."""
        for batch_id in self.pending():
            self.run_batch(batch_id)
        self.coordinator.start()

    def crash(self, exc: type[BaseException] = InjectedFault) -> BaseException:
        """Run until the armed fault point fires; return the error."""
        with pytest.raises(exc) as info:
            self.run()
        return info.value

    def restart(self, faults_spec: str | None = None) -> Coordinator:
        """Drop the (crashed) driver, re-arm faults for the new one (None: none), start a new one."""
        self.coordinator.sink.close()
        faults.configure(faults_spec)
        self.coordinator = self.new_coordinator()
        return self.coordinator

    def reader(self) -> ReferenceSink:
        return ReferenceSink(self.db)

    def visible(self) -> Counter[str]:
        reader = self.reader()
        try:
            return canon(reader.rows(self.app_id))
        finally:
            reader.close()

    def expected(self, upto: int | None = None) -> Counter[str]:
        batches = self.batches if upto is None else self.batches[:upto]
        return canon([r for b in batches for r in b.rows])

    def assert_exact(self) -> None:
        """Every batch landed exactly once, with its bundle, and nothing is left in doubt."""
        reader = self.reader()
        try:
            assert canon(reader.rows(self.app_id)) == self.expected()
            bundles = reader.bundles(self.app_id)
            assert [b.batch.batch_id for b in bundles] == list(range(len(self.batches)))
            for bundle, batch in zip(bundles, self.batches, strict=True):
                assert bundle.fingerprint == batch.expected_fingerprint(bundle.fingerprint.version)
            assert reader.recover(self.app_id) == []
            assert reader.in_doubt_count(self.app_id) == 0
        finally:
            reader.close()
        assert self.ckpt.spark().manifest_batches(self.app_id) == []


def db_query(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Read the reference sink's SQLite file directly (to see what its API hides)."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()
