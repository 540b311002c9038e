"""The contract suite's fan-out cases: a connector's sink paired with the reference sink in one fan-out.

A connector adopts them beside the suite, with the same harness::

    from eosink.contracts.fanout import fanout_contract_tests

    TestMySinkFanOut = fanout_contract_tests(MySinkHarness())

Each case runs batches in Spark's order (as the suite's other cases) through a
:class:`~eosink.fanout.FanOut` of the connector's sink and a
:class:`~eosink.connectors.reference.ReferenceSink` on a file of the case's namespace, in both
orders: the connector's sink first (it commits before the reference sink) or second. A crash
between the two sinks' commits (F14) or in the first sink's commit (F6), then a restart from
configuration, must end with every batch once in each sink, the second sink never holding a batch
the first does not (checked right after the crash), and nothing in doubt. ``make test`` runs the
2pc and txid-check cases with the connector's sink first; the rest are marked ``full``.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import pytest

from eosink import faults
from eosink.connectors.reference import ReferenceSink
from eosink.contract import Sink
from eosink.contracts._cases import HarnessCases
from eosink.contracts._mini import (
    FAST,
    VARIANTS,
    FakeCheckpoint,
    MemoryBatch,
    Variant,
    canon,
    make_rows,
    run_in_spark_order,
)
from eosink.contracts.harness import Namespace, SinkHarness
from eosink.errors import InjectedFault
from eosink.fanout import FanOut, member_app_id
from eosink.strategies import supported_strategies

__all__ = ["FanOutContract", "fanout_contract_tests"]

APP = "fanout-contract"
SINK, REFERENCE = "sink", "reference"
QUICK = {("2pc", "sink-first"), ("txid-check", "sink-first")}


def fanout_contract_tests(harness: SinkHarness, name: str | None = None) -> type[FanOutContract]:
    """A pytest test class running the fan-out cases against ``harness``'s sink paired with the reference sink."""
    import sys

    cls_name = name or f"Test{type(harness).__name__.removesuffix('Harness')}FanOut"
    module = str(sys._getframe(1).f_globals.get("__name__", __name__))
    return type(cls_name, (FanOutContract,), {"harness": harness, "__module__": module})


def _cases() -> list[Any]:
    return [
        pytest.param(v, order, marks=() if (v.id, order) in QUICK else pytest.mark.full, id=f"{v.id}-{order}")
        for v in VARIANTS
        for order in ("sink-first", "sink-second")
    ]


class _Run:
    """Spark's order of events around a fan-out of the harness's sink and the reference sink."""

    def __init__(self, harness: SinkHarness, ns: Namespace, variant: Variant, sink_first: bool) -> None:
        self.harness, self.ns, self.variant = harness, ns, variant
        self.order = [SINK, REFERENCE] if sink_first else [REFERENCE, SINK]
        self.batches = [MemoryBatch(make_rows(b, duplicate=not variant.user_keys)) for b in range(3)]
        self.ckpt = FakeCheckpoint(ns.path / "checkpoint")
        self.fanout = self._new()

    def make(self, name: str) -> Sink[Any]:
        return self.harness.make_sink(self.ns) if name == SINK else ReferenceSink(self.ns.path / "reference.db")

    def _new(self) -> FanOut:
        members = [(name, self.make(name)) for name in self.order]
        return FanOut(members, APP, self.variant.make(), self.ckpt.spark(), FAST, threaded=False)

    def run(self) -> None:
        run_in_spark_order(self.fanout, self.ckpt, self.batches, two_pc=self.variant.two_pc)

    def crash(self, spec: str) -> None:
        faults.configure(spec)
        with pytest.raises(InjectedFault):
            self.run()
        faults.reset()

    def restart(self) -> None:
        for coordinator in self.fanout.coordinators:
            with contextlib.suppress(Exception):
                coordinator.sink.close()  # a dead driver commits nothing more
        self.fanout = self._new()

    def close(self) -> None:
        for coordinator in self.fanout.coordinators:
            with contextlib.suppress(Exception):
                coordinator.sink.close()

    def newest(self, name: str) -> int | None:
        """The newest batch sink ``name`` holds, read by a fresh sink object."""
        sink = self.make(name)
        try:
            last = sink.fetch_last_bundle(member_app_id(APP, name))
            return None if last is None else last.batch.batch_id
        finally:
            sink.close()

    def rows(self, name: str) -> Counter[str]:
        if name == SINK:
            return canon(self.harness.read_committed(self.ns))
        reader = ReferenceSink(self.ns.path / "reference.db")
        try:
            return canon(reader.rows(member_app_id(APP, REFERENCE)))
        finally:
            reader.close()

    def assert_exact(self) -> None:
        expected = canon([r for b in self.batches for r in b.rows])
        for name in self.order:
            assert self.rows(name) == expected, f"{name}: not every batch once"
            assert self.newest(name) == len(self.batches) - 1, name
            sink = self.make(name)
            try:
                assert sink.recover(member_app_id(APP, name)) == [], f"{name}: work left in doubt"
            finally:
                sink.close()
            assert self.ckpt.spark().manifest_batches(member_app_id(APP, name)) == [], name


class FanOutContract(HarnessCases):
    """The fan-out cases. Subclass with ``harness = MyHarness()`` (or use :func:`fanout_contract_tests`)."""

    def _run(self, ns: Namespace, variant: Variant, order: str) -> _Run:
        sink = self.harness.make_sink(ns)
        try:
            if variant.make().name not in supported_strategies(sink.capabilities):
                pytest.skip(f"capability: the sink does not offer strategy {variant.id}")
        finally:
            sink.close()
        return _Run(self.harness, ns, variant, order == "sink-first")

    @pytest.mark.parametrize(("variant", "order"), _cases())
    def test_fanout_a_crash_between_the_sinks_then_a_restart_is_exact_in_each(
        self, ns: Namespace, variant: Variant, order: str
    ) -> None:
        """The driver dies after the first sink committed batch 1 and before the second did (F14), then
        restarts from configuration.

        Pass: right after the crash the first sink holds batch 1 and the second does not (the order); after
        the restart each sink holds every batch once, its newest bundle the last batch's, nothing in doubt."""
        run = self._run(ns, variant, order)
        try:
            run.crash("F14@1:raise")
            first, second = run.order
            assert run.newest(first) == 1 and run.newest(second) == 0, (run.newest(first), run.newest(second))
            run.restart()
            run.run()
            run.assert_exact()
        finally:
            run.close()

    @pytest.mark.full
    @pytest.mark.parametrize(("variant", "order"), _cases())
    def test_fanout_a_crash_inside_the_first_commit_then_a_restart_is_exact_in_each(
        self, ns: Namespace, variant: Variant, order: str
    ) -> None:
        """The driver dies inside the first sink's commit of batch 1 (F6), before the second sink's.

        Pass: the second sink does not hold batch 1 after the crash; after the restart each sink holds
        every batch once, nothing in doubt."""
        run = self._run(ns, variant, order)
        try:
            run.crash("F6@1:raise")
            assert run.newest(run.order[1]) == 0
            run.restart()
            run.run()
            run.assert_exact()
        finally:
            run.close()
