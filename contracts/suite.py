"""The contract suite: every scenario a sink must pass to be exactly-once with eosink.

A connector adopts it with a :class:`~eosink.contracts.SinkHarness`::

    TestMySinkContract = contract_tests(MySinkHarness())

Cases come in four groups, each case's docstring says what it proves, how, and its pass
condition:

* **contract semantics** — the rules of :mod:`eosink.contract`, operation by operation;
* **crashes inside the sink** — a crash walked through every step of ``pre_commit`` and
  ``commit``, and a real subprocess SIGKILL;
* **the failure matrix F1-F13 at protocol level** — each strategy driven by the real
  coordinator through a simulated Spark (:mod:`eosink.contracts._mini`); a crash drops every
  object and reopens from configuration;
* **network faults** — ambiguous commits and an unreachable server through the fault proxy
  (only for harnesses that declare a fault endpoint);
* **random schedules** — a hypothesis property test of begin / write / pre_commit / commit /
  abort / crash / recover across batches and app_ids, derandomized so every run gives the
  same verdict.

A case is skipped only when the sink's declared :class:`~eosink.contract.Capabilities` (or a
missing fault endpoint) rule it out; the skip reason names the capability.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from eosink import faults
from eosink.contract import BatchRef, Capabilities, CommitStatus, Committable, Sink
from eosink.contracts._cases import HarnessCases
from eosink.contracts._mini import (
    FAST,
    VARIANTS,
    FakeCheckpoint,
    MemoryBatch,
    NoWatcherCoordinator,
    Variant,
    make_rows,
)
from eosink.contracts._steps import (
    CrashAt,
    SimulatedCrash,
    bundle_for,
    canon,
    crash_steps,
    prepare,
    rows_for,
    settle_commit,
    settle_status,
    sink_files,
)
from eosink.contracts.harness import Failover, Namespace, SinkHarness
from eosink.coordinator import Coordinator
from eosink.errors import (
    AmbiguousCommitError,
    CommitAbortedError,
    CommittedWorkLostError,
    FencedError,
    InjectedFault,
    NonDeterministicReplayError,
    TransientError,
)
from eosink.strategies import supported_strategies

__all__ = ["SinkContract", "contract_tests"]

APP = "app_a"
OTHER_APP = "app_b"
MAX_STEPS = 3000
CRASH_WALK_TIMEOUT_S = 3600
"""pytest-timeout's limit for a crash walk at every step (test-full): each step commits a batch and reads all
that is visible, so a walk over a sink with a long commit path runs for many minutes on a 2-core machine."""
MAX_COMMIT_REQUESTS = 100
"""The most server requests one commit of the suite's two-share batch may take before the cut walk gives up
(HDFS with Hive partitions takes over 40: a rename per file and a directory per partition value)."""


def contract_tests(harness: SinkHarness, name: str | None = None) -> type[SinkContract]:
    """A pytest test class running the whole suite against ``harness``'s sink."""
    cls_name = name or f"Test{type(harness).__name__.removesuffix('Harness')}Contract"
    return type(cls_name, (SinkContract,), {"harness": harness, "__module__": _caller_module()})


def _caller_module() -> str:
    frame = sys._getframe(2)
    return str(frame.f_globals.get("__name__", __name__))


# -- the simulated driver ------------------------------------------------------------------------


class _Driver:
    """Spark's order of events around a coordinator, with restarts from configuration (see _mini)."""

    def __init__(self, suite: SinkContract, ns: Namespace, variant: Variant, batches: Sequence[MemoryBatch]) -> None:
        self.suite, self.ns, self.variant = suite, ns, variant
        self.batches = list(batches)
        self.ckpt = FakeCheckpoint(ns.path / "checkpoint")
        self.coordinator = self._new()

    def _new(self) -> Coordinator:
        sink = self.suite.harness.make_sink(self.ns)
        return NoWatcherCoordinator(sink, APP, self.variant.make(), self.ckpt.spark(), FAST)

    def run(self) -> None:
        """Process every batch Spark has not committed, in order; then make sure recovery ran."""
        for batch_id in range(len(self.batches)):
            if self.ckpt.has_commit(batch_id):
                continue
            self.ckpt.write_offsets(batch_id)
            self.coordinator.process(batch_id, self.batches[batch_id])
            self.ckpt.write_commit(batch_id)
            if self.variant.two_pc:
                self.coordinator.commit_ready()
        self.coordinator.start()

    def crash(self) -> BaseException:
        """Run until the armed fault point fires; the error."""
        with pytest.raises(InjectedFault) as info:
            self.run()
        return info.value

    def restart(self, spec: str | None = None) -> None:
        """Drop the crashed driver and its sink; re-arm faults (None: none); a new driver from configuration."""
        with contextlib.suppress(Exception):
            self.coordinator.sink.close()
        faults.configure(spec)
        self.coordinator = self._new()

    def expected(self) -> Counter[str]:
        return canon([r for b in self.batches for r in b.rows])

    def assert_exact(self) -> None:
        """Every batch exactly once; the last bundle is the last batch's; nothing left in doubt."""
        sink = self.suite.harness.make_sink(self.ns)
        try:
            assert canon(self.suite.harness.read_committed(self.ns)) == self.expected()
            last = sink.fetch_last_bundle(APP)
            assert last is not None and last.batch.batch_id == len(self.batches) - 1
            assert last.fingerprint == self.batches[-1].expected_fingerprint(self.variant.make().fingerprint_version())
            assert sink.recover(APP) == []
        finally:
            sink.close()
        assert self.ckpt.spark().manifest_batches(APP) == []


def _batches(variant: Variant, n: int = 3, **kwargs: Any) -> list[MemoryBatch]:
    return [MemoryBatch(make_rows(b, duplicate=not variant.user_keys), **kwargs) for b in range(n)]


_CHILD = """
import os, pickle, sys
from eosink.contracts._steps import prepare
job = pickle.load(open(sys.argv[1], "rb"))
sink = job["sink"]
done = []
for participant, rows in enumerate(job["shares"]):
    done.append(prepare(sink, job["batch"], job["epoch"], participant, rows))
with open(sys.argv[2] + ".tmp", "wb") as out:
    pickle.dump(done, out)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
sys.stdin.read()  # wait to be killed
"""


# -- the suite ---------------------------------------------------------------------------------


class SinkContract(HarnessCases):
    """The contract suite. Subclass with ``harness = MyHarness()`` (or use :func:`contract_tests`)."""

    # -- fixtures --------------------------------------------------------------------------

    @pytest.fixture
    def sink(self, ns: Namespace) -> Iterator[Sink[Any]]:
        """The sink of a first simulated process."""
        made = self.harness.make_sink(ns)
        yield made
        with contextlib.suppress(Exception):
            made.close()

    @pytest.fixture(params=VARIANTS, ids=[v.id for v in VARIANTS])
    def variant(self, request: pytest.FixtureRequest, sink: Sink[Any]) -> Variant:
        """Each strategy in turn; skipped when the sink's capabilities rule the strategy out."""
        variant: Variant = request.param
        strategy = variant.make()
        if strategy.name not in supported_strategies(sink.capabilities):
            missing = [c for c in strategy.required if not getattr(sink.capabilities, c)]
            pytest.skip(f"capability: strategy {variant.id} needs {', '.join(f'{c}=True' for c in missing)}")
        return variant

    # -- helpers -----------------------------------------------------------------------------

    def reopen(self, ns: Namespace, old: Sink[Any] | None = None) -> Sink[Any]:
        """A crash: drop the old process's sink, make a new one from configuration."""
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        return self.harness.make_sink(ns)

    def visible(self, ns: Namespace) -> Counter[str]:
        return canon(self.harness.read_committed(ns))

    def prepared_batch(
        self, sink: Sink[Any], app: str, batch_id: int, epoch: int, *, shares: int = 2, base: int = 0
    ) -> tuple[BatchRef, list[Committable], list[dict[str, Any]]]:
        batch = BatchRef(app, batch_id)
        rows = [rows_for(app, batch_id, p, 4, base=base) for p in range(shares)]
        committables = [prepare(sink, batch, epoch, p, share) for p, share in enumerate(rows)]
        return batch, committables, [r for share in rows for r in share]

    @staticmethod
    def _require(caps: Capabilities, name: str, why: str) -> None:
        if not getattr(caps, name):
            pytest.skip(f"capability: {name}=False ({why})")

    # == contract semantics ====================================================================

    def test_fence_hands_out_increasing_epochs_and_fences_older_writers(self, sink: Sink[Any], ns: Namespace) -> None:
        """``fence`` gives each new writer a higher epoch; work of an older epoch is refused.

        How: fence twice; prepare with the older epoch; commit a batch prepared under the newer
        epoch with a bundle of the older one. Pass: the epochs increase; ``pre_commit`` (or
        ``begin``) of the older epoch and ``commit`` with the older epoch raise FencedError.
        """
        first = sink.fence(APP)
        second = self.reopen(ns).fence(APP)
        assert second > first
        with pytest.raises(FencedError):
            prepare(sink, BatchRef(APP, 0), first, 0, rows_for(APP, 0, 0, 2))
        batch, committables, _ = self.prepared_batch(sink, APP, 1, second)
        with pytest.raises(FencedError):
            sink.commit(batch, committables, bundle_for(batch, first, committables))
        assert self.visible(ns) == Counter()

    def test_fence_is_per_app_id(self, sink: Sink[Any], ns: Namespace) -> None:
        """A new writer of one app_id does not fence another app_id.

        How: fence app_a, prepare for it; fence app_b twice. Pass: app_a's prepared batch
        still commits with app_a's epoch.
        """
        epoch = sink.fence(APP)
        batch, committables, rows = self.prepared_batch(sink, APP, 0, epoch)
        sink.fence(OTHER_APP)
        sink.fence(OTHER_APP)
        sink.commit(batch, committables, bundle_for(batch, epoch, committables))
        assert self.visible(ns) == canon(rows)

    def test_pre_commit_is_durable_and_invisible(self, sink: Sink[Any], ns: Namespace) -> None:
        """Prepared work is invisible to readers, and no bundle exists before commit.

        How: prepare two participants' shares. Pass: a reader sees no row; ``fetch_last_bundle``
        is None; ``commit_status`` is PREPARED.
        """
        self._require(sink.capabilities, "supports_prepare", "no invisible prepared state")
        epoch = sink.fence(APP)
        batch, committables, _ = self.prepared_batch(sink, APP, 0, epoch)
        assert self.visible(ns) == Counter()
        assert sink.fetch_last_bundle(APP) is None
        assert sink.commit_status(batch, committables) is CommitStatus.PREPARED

    def test_commit_makes_the_batch_and_its_bundle_visible(self, sink: Sink[Any], ns: Namespace) -> None:
        """``commit`` makes every row of the batch visible and stores its bundle.

        How: prepare two shares (nulls, unicode, floats among the values), commit. Pass: the
        reader sees exactly those rows; ``fetch_last_bundle`` returns the bundle, equal field
        by field; ``commit_status`` is COMMITTED.
        """
        epoch = sink.fence(APP)
        batch, committables, rows = self.prepared_batch(sink, APP, 0, epoch)
        bundle = bundle_for(batch, epoch, committables)
        sink.commit(batch, committables, bundle)
        assert self.visible(ns) == canon(rows)
        assert sink.fetch_last_bundle(APP) == bundle
        assert sink.commit_status(batch, committables) is CommitStatus.COMMITTED

    def test_commit_is_idempotent(self, sink: Sink[Any], ns: Namespace) -> None:
        """Committing the same batch again — same process or a new one — changes nothing.

        How: commit; commit again; commit once more from a reopened sink. Pass: no error, and
        every row is visible exactly once.
        """
        epoch = sink.fence(APP)
        batch, committables, rows = self.prepared_batch(sink, APP, 0, epoch)
        bundle = bundle_for(batch, epoch, committables)
        sink.commit(batch, committables, bundle)
        sink.commit(batch, committables, bundle)
        self.reopen(ns).commit(batch, committables, bundle)
        assert self.visible(ns) == canon(rows)

    def test_abort_discards_and_is_idempotent(self, sink: Sink[Any], ns: Namespace) -> None:
        """``abort`` discards prepared work; aborting again (or from a new process) is harmless.

        How: prepare, abort, abort, abort from a reopened sink. Pass: nothing visible; no
        bundle; ``recover`` lists nothing; ``commit_status`` is ABORTED; a commit of the aborted
        work raises CommitAbortedError.
        """
        epoch = sink.fence(APP)
        batch, committables, _ = self.prepared_batch(sink, APP, 0, epoch)
        sink.abort(committables)
        sink.abort(committables)
        self.reopen(ns).abort(committables)
        assert self.visible(ns) == Counter()
        assert sink.fetch_last_bundle(APP) is None
        assert sink.recover(APP) == []
        assert sink.commit_status(batch, committables) is CommitStatus.ABORTED
        with pytest.raises(CommitAbortedError):
            sink.commit(batch, committables, bundle_for(batch, epoch, committables))

    def test_abort_after_commit_is_an_error(self, sink: Sink[Any], ns: Namespace) -> None:
        """Aborting committed work raises CommitAbortedError and leaves the batch visible.

        How: commit, then abort the same committables. Pass: CommitAbortedError; the rows and
        the bundle are still there.
        """
        epoch = sink.fence(APP)
        batch, committables, rows = self.prepared_batch(sink, APP, 0, epoch)
        bundle = bundle_for(batch, epoch, committables)
        sink.commit(batch, committables, bundle)
        with pytest.raises(CommitAbortedError):
            sink.abort(committables)
        assert self.visible(ns) == canon(rows)
        assert sink.fetch_last_bundle(APP) == bundle

    def test_commit_status_tells_the_truth(self, sink: Sink[Any], ns: Namespace) -> None:
        """``commit_status`` answers from the sink's state, never a guess.

        How: three batches: one only prepared, one committed, one aborted; asked from a reopened
        sink (the process that did the work is gone). Pass: PREPARED, COMMITTED and ABORTED
        respectively (IN_PROGRESS is not acceptable once nothing is running).
        """
        epoch = sink.fence(APP)
        prepared = self.prepared_batch(sink, APP, 0, epoch)
        committed = self.prepared_batch(sink, APP, 1, epoch)
        sink.commit(committed[0], committed[1], bundle_for(committed[0], epoch, committed[1]))
        aborted = self.prepared_batch(sink, APP, 2, epoch)
        sink.abort(aborted[1])
        other = self.reopen(ns, sink)
        assert other.commit_status(prepared[0], prepared[1]) is CommitStatus.PREPARED
        assert other.commit_status(committed[0], committed[1]) is CommitStatus.COMMITTED
        assert other.commit_status(aborted[0], aborted[1]) is CommitStatus.ABORTED

    def test_recover_returns_exactly_this_app_ids_in_doubt_work(self, sink: Sink[Any], ns: Namespace) -> None:
        """``recover(app_id)`` lists every prepared, uncommitted committable of that app_id, and no other's.

        How: app_a has one committed and one prepared batch, app_b one prepared batch; recover
        from a reopened sink. Pass: app_a's list is exactly its prepared committables (by id);
        app_b's exactly its own; after committing app_a's, app_a's list is empty and app_b's
        unchanged.
        """
        self._require(sink.capabilities, "supports_recover", "cannot list in-doubt work")
        epoch_a, epoch_b = sink.fence(APP), sink.fence(OTHER_APP)
        done = self.prepared_batch(sink, APP, 0, epoch_a)
        sink.commit(done[0], done[1], bundle_for(done[0], epoch_a, done[1]))
        pending_a = self.prepared_batch(sink, APP, 1, epoch_a)
        pending_b = self.prepared_batch(sink, OTHER_APP, 0, epoch_b, base=500)
        other = self.reopen(ns, sink)
        assert sorted(c.id for c in other.recover(APP)) == sorted(c.id for c in pending_a[1])
        assert sorted(c.id for c in other.recover(OTHER_APP)) == sorted(c.id for c in pending_b[1])
        assert all(c.batch == pending_a[0] for c in other.recover(APP))
        other.commit(pending_a[0], pending_a[1], bundle_for(pending_a[0], epoch_a, pending_a[1]))
        assert other.recover(APP) == []
        assert sorted(c.id for c in other.recover(OTHER_APP)) == sorted(c.id for c in pending_b[1])

    def test_prepared_work_survives_its_process(self, sink: Sink[Any], ns: Namespace) -> None:
        """Work prepared by one process can be committed by another (the 2PC coordinator's case).

        How: prepare; drop the sink; a new sink from configuration commits the committables it
        got back from ``recover``. Pass: every row visible once, the bundle stored.
        """
        self._require(sink.capabilities, "supports_prepare", "prepared work does not outlive its process")
        epoch = sink.fence(APP)
        batch, committables, rows = self.prepared_batch(sink, APP, 0, epoch)
        other = self.reopen(ns, sink)
        recovered = other.recover(APP) if other.capabilities.supports_recover else committables
        assert sorted(c.id for c in recovered) == sorted(c.id for c in committables)
        other.commit(batch, committables, bundle_for(batch, epoch, committables))
        assert self.visible(ns) == canon(rows)

    def test_fetch_last_bundle_is_the_newest_and_per_app_id(self, sink: Sink[Any], ns: Namespace) -> None:
        """``fetch_last_bundle`` returns the newest committed batch's bundle of that app_id only.

        How: commit batches 0 and 1 of app_a and batch 5 of app_b. Pass: app_a's last bundle is
        batch 1's, app_b's is batch 5's, an unknown app_id has None.
        """
        epoch_a, epoch_b = sink.fence(APP), sink.fence(OTHER_APP)
        bundles = []
        for batch_id in (0, 1):
            batch, committables, _ = self.prepared_batch(sink, APP, batch_id, epoch_a, shares=1)
            bundles.append(bundle_for(batch, epoch_a, committables))
            sink.commit(batch, committables, bundles[-1])
        batch, committables, _ = self.prepared_batch(sink, OTHER_APP, 5, epoch_b, shares=1, base=500)
        other_bundle = bundle_for(batch, epoch_b, committables)
        sink.commit(batch, committables, other_bundle)
        assert sink.fetch_last_bundle(APP) == bundles[1]
        assert sink.fetch_last_bundle(OTHER_APP) == other_bundle
        assert sink.fetch_last_bundle("no_such_app") is None

    def test_empty_batch_commits_its_bundle(self, sink: Sink[Any], ns: Namespace) -> None:
        """A batch without rows (no committables) still records its bundle.

        How: commit batch 0 with no committables, twice. Pass: ``fetch_last_bundle`` is its
        bundle; nothing visible; status COMMITTED.
        """
        epoch = sink.fence(APP)
        batch = BatchRef(APP, 0)
        bundle = bundle_for(batch, epoch, [])
        sink.commit(batch, [], bundle)
        sink.commit(batch, [], bundle)
        assert sink.fetch_last_bundle(APP) == bundle
        assert self.visible(ns) == Counter()
        assert sink.commit_status(batch, []) is CommitStatus.COMMITTED

    def test_upsert_by_key_replaces_rows(self, sink: Sink[Any], ns: Namespace) -> None:
        """With ``upsert_keys``, a row whose key exists replaces it instead of being added.

        How: commit rows with ids 0-3; commit a second batch upserting ids 2-5 with new names.
        Pass: six rows, ids 2 and 3 with the second batch's values.
        """
        self._require(sink.capabilities, "supports_keys", "no upsert by key")
        epoch = sink.fence(APP)
        first = [dict(r, id=i) for i, r in enumerate(rows_for(APP, 0, 0, 4))]
        second = [dict(r, id=i + 2, name=f"updated {i}") for i, r in enumerate(rows_for(APP, 1, 0, 4))]
        for batch_id, rows in ((0, first), (1, second)):
            batch = BatchRef(APP, batch_id)
            c = prepare(sink, batch, epoch, 0, rows, upsert_keys=("id",))
            sink.commit(batch, [c], bundle_for(batch, epoch, [c]))
        assert self.visible(ns) == canon(first[:2] + second)

    def test_commit_status_answers_for_the_exact_app_id_and_batch(self, sink: Sink[Any], ns: Namespace) -> None:
        """Rule: ``commit_status`` answers for the exact (app_id, batch), never for a neighbour's.

        How: two app_ids at the same batch number, one committed and the other prepared, then the
        other aborted; and within one app_id, an older batch still prepared while a newer one is
        committed, and a newer one prepared after an older one committed. Pass: each answer is the
        batch's own (COMMITTED, PREPARED, ABORTED), asked from a new process.
        """
        epoch_a, epoch_b = sink.fence(APP), sink.fence(OTHER_APP)
        a3 = self.prepared_batch(sink, APP, 3, epoch_a)
        b3 = self.prepared_batch(sink, OTHER_APP, 3, epoch_b, base=500)
        sink.commit(a3[0], a3[1], bundle_for(a3[0], epoch_a, a3[1]))
        other = self.reopen(ns, sink)
        assert other.commit_status(a3[0], a3[1]) is CommitStatus.COMMITTED
        assert other.commit_status(b3[0], b3[1]) is CommitStatus.PREPARED, "another app_id's bundle answered"
        other.abort(b3[1])
        assert other.commit_status(b3[0], b3[1]) is CommitStatus.ABORTED
        assert other.commit_status(a3[0], a3[1]) is CommitStatus.COMMITTED
        older = self.prepared_batch(other, APP, 4, epoch_a)
        newer = self.prepared_batch(other, APP, 5, epoch_a)
        other.commit(newer[0], newer[1], bundle_for(newer[0], epoch_a, newer[1]))
        again = self.reopen(ns, other)
        assert again.commit_status(older[0], older[1]) is CommitStatus.PREPARED, "a newer bundle answered for it"
        later = self.prepared_batch(again, APP, 6, epoch_a)
        assert again.commit_status(later[0], later[1]) is CommitStatus.PREPARED, "an older bundle answered for it"
        again.abort(older[1])
        assert again.commit_status(older[0], older[1]) is CommitStatus.ABORTED

    def test_fetch_last_bundle_and_recover_are_per_app_id_exactly(self, sink: Sink[Any], ns: Namespace) -> None:
        """Rule: ``fetch_last_bundle`` and ``recover`` are per app_id, exactly: no prefix, case or pattern match.

        How: app_ids where one is a prefix of another (``orders``, ``orders_eu``), that differ only
        in case (``Orders``), and that hold LIKE and glob metacharacters (``ord_rs``, ``ord%``,
        ``ord.rs``); each commits one batch of its own number and leaves another prepared.
        Pass: from a new process, each app_id's last bundle is its own and ``recover`` lists
        exactly its own prepared committables.
        """
        apps = ["orders", "orders_eu", "Orders", "ord_rs", "ord%", "ord.rs"]
        bundles, pending = {}, {}
        for n, app in enumerate(apps):
            epoch = sink.fence(app)
            batch, committables, _ = self.prepared_batch(sink, app, n, epoch, shares=1, base=1000 * (n + 1))
            bundles[app] = bundle_for(batch, epoch, committables)
            sink.commit(batch, committables, bundles[app])
            pending[app] = self.prepared_batch(sink, app, 20 + n, epoch, shares=1, base=1000 * (n + 1))[1]
        other = self.reopen(ns, sink)
        for app in apps:
            assert other.fetch_last_bundle(app) == bundles[app], f"fetch_last_bundle({app!r}) is not its own"
            if other.capabilities.supports_recover:
                listed = sorted(c.id for c in other.recover(app))
                assert listed == sorted(c.id for c in pending[app]), f"recover({app!r}) lists other app_ids' work"
        assert other.fetch_last_bundle("ord") is None and other.fetch_last_bundle("orders_") is None

    def test_recover_lists_in_doubt_work_whatever_epoch_prepared_it(self, sink: Sink[Any], ns: Namespace) -> None:
        """Rule: ``recover`` lists every in-doubt committable of the app_id, whatever epoch prepared it.

        How: a writer prepares batch 1 and crashes; a newer writer fences and prepares batch 2.
        Pass: ``recover`` lists both batches' committables (the older epoch's too: recovery may have
        to roll them forward); the older ones can then be aborted, and are gone from ``recover``
        while the newer ones stay.
        """
        self._require(sink.capabilities, "supports_recover", "cannot list in-doubt work")
        old_epoch = sink.fence(APP)
        crashed = self.prepared_batch(sink, APP, 1, old_epoch)
        newer = self.reopen(ns, sink)
        new_epoch = newer.fence(APP)
        current = self.prepared_batch(newer, APP, 2, new_epoch)
        listed = sorted(c.id for c in newer.recover(APP))
        assert listed == sorted(c.id for c in crashed[1] + current[1]), "the crashed writer's work is not listed"
        newer.abort(crashed[1])
        assert sorted(c.id for c in newer.recover(APP)) == sorted(c.id for c in current[1])
        assert self.visible(ns) == Counter()

    def test_commit_publishes_exactly_the_committables_it_is_given(self, sink: Sink[Any], ns: Namespace) -> None:
        """Rule: ``commit`` publishes exactly the committables it is given, no other attempt of the batch.

        How: participant 0 of a batch runs twice (a speculative duplicate, or a straggler that
        prepared late): both attempts are prepared when the batch commits with the first attempt
        and participant 1. Pass: every row visible once; the other attempt is still listed by
        ``recover`` and can be aborted; aborting it changes nothing visible.
        """
        self._require(sink.capabilities, "supports_prepare", "no invisible prepared state")
        epoch = sink.fence(APP)
        batch, committables, rows = self.prepared_batch(sink, APP, 0, epoch)
        straggler = prepare(sink, batch, epoch, 0, rows_for(APP, 0, 0, 4))
        sink.commit(batch, committables, bundle_for(batch, epoch, committables))
        assert self.visible(ns) == canon(rows), "another attempt of the batch was published too"
        other = self.reopen(ns, sink)
        if other.capabilities.supports_recover:
            assert [c.id for c in other.recover(APP)] == [straggler.id]
        other.abort([straggler])
        assert self.visible(ns) == canon(rows)
        assert other.commit_status(batch, committables) is CommitStatus.COMMITTED

    def test_batch_ids_and_epochs_are_compared_as_numbers(self, sink: Sink[Any], ns: Namespace) -> None:
        """Rule: batch ids and epochs are numbers: 10 comes after 9, and epoch 9 is older than epoch 11.

        How: commit batches 9, 10 and 11, then 99 and 100; fence until the epoch passes 10, then
        write with epoch 9. Pass: ``fetch_last_bundle`` returns batch 10 after it, 11 after it,
        100 after it; the writer of epoch 9 gets FencedError at ``pre_commit`` and at ``commit``.
        """
        epoch = sink.fence(APP)
        for batch_id in (9, 10, 11, 99, 100):
            batch, committables, _ = self.prepared_batch(sink, APP, batch_id, epoch, shares=1)
            bundle = bundle_for(batch, epoch, committables)
            sink.commit(batch, committables, bundle)
            assert sink.fetch_last_bundle(APP) == bundle, f"after batch {batch_id} the last bundle is another's"
        while epoch < 11:
            epoch = sink.fence(APP)
        with pytest.raises(FencedError):
            prepare(sink, BatchRef(APP, 101), 9, 0, rows_for(APP, 101, 0, 2))
        batch, committables, _ = self.prepared_batch(sink, APP, 102, epoch, shares=1)
        with pytest.raises(FencedError):
            sink.commit(batch, committables, bundle_for(batch, 9, committables))

    def test_a_fenced_writer_cannot_commit_its_prepared_batch(self, sink: Sink[Any], ns: Namespace) -> None:
        """Rule: ``commit`` of an older epoch raises FencedError, even for work that is prepared and intact.

        How: a writer prepares a non-empty batch; a newer writer fences (and has not recovered
        yet); the old one commits its batch with its own epoch. Pass: FencedError (not another
        error); nothing visible; the work is still PREPARED, so the new writer's recovery decides.
        """
        old_epoch = sink.fence(APP)
        batch, committables, _ = self.prepared_batch(sink, APP, 1, old_epoch)
        newer = self.reopen(ns)
        newer.fence(APP)
        with pytest.raises(FencedError):
            sink.commit(batch, committables, bundle_for(batch, old_epoch, committables))
        assert self.visible(ns) == Counter()
        if sink.capabilities.supports_prepare:
            assert newer.commit_status(batch, committables) is CommitStatus.PREPARED

    # == crashes inside the sink ===============================================================

    @pytest.mark.timeout(CRASH_WALK_TIMEOUT_S)
    def test_crash_at_every_step_of_commit_keeps_the_bundle_with_its_data(
        self, sink: Sink[Any], ns: Namespace, request: pytest.FixtureRequest
    ) -> None:
        """A crash anywhere inside ``commit`` never separates the bundle from its data, and a new commit completes.

        How: for k = 1, 2, ...: prepare a fresh two-share batch, crash ``commit`` at the k-th
        line of the sink's own code (the process's objects are dropped; its open transaction
        rolled back), then look from a new process; repeat until a commit finishes before
        step k. Pass, after every crash: with atomic batch visibility, either no row of the
        batch and no bundle, or all rows and the bundle; without it, a bundle only when all
        rows are visible; and a repeated ``commit`` from a new process always completes the
        batch exactly once. (F6 at the sink's level.)
        """
        files = sink_files(sink)
        atomic = sink.capabilities.atomic_batch_visibility
        epoch = sink.fence(APP)
        current = sink
        for step in crash_steps(request, MAX_STEPS):
            batch, committables, rows = self.prepared_batch(current, APP, step, epoch, base=0)
            bundle = bundle_for(batch, epoch, committables)
            crash = CrashAt(files, step)
            with contextlib.suppress(SimulatedCrash), crash.armed():
                current.commit(batch, committables, bundle)
            after = self.reopen(ns, current)
            seen = self.visible(ns)
            mine = sum(seen[k] for k in canon(rows))
            has_bundle = after.commit_status(batch, committables) is CommitStatus.COMMITTED
            if atomic:
                assert mine in (0, len(rows)), f"crash at step {step}: {mine} of {len(rows)} rows visible"
                assert has_bundle == (mine == len(rows)), f"crash at step {step}: bundle and data disagree"
            elif has_bundle:
                assert mine == len(rows), f"crash at step {step}: bundle visible before all its rows"
            after.commit(batch, committables, bundle)
            seen = self.visible(ns)
            assert all(seen[key] == 1 for key in canon(rows)), f"crash at step {step}: not exactly once"
            assert after.fetch_last_bundle(APP) == bundle
            current = after
            if not crash.fired:
                return
        pytest.fail(f"commit did not finish within {MAX_STEPS} steps")

    @pytest.mark.timeout(CRASH_WALK_TIMEOUT_S)
    def test_crash_at_every_step_of_pre_commit_leaves_nothing_visible(
        self, sink: Sink[Any], ns: Namespace, request: pytest.FixtureRequest
    ) -> None:
        """A crash anywhere in begin / write / pre_commit leaves nothing visible, and a new attempt lands once.

        How: for k = 1, 2, ...: crash a participant at the k-th line of the sink's code, drop
        the process, fence from a new one (which cleans up a crashed writer's open work), then
        write the share again as a new attempt and commit it. Pass: after each crash no row of
        the share is visible and ``recover`` lists no committable of that batch that was not
        fully prepared; after the new attempt's commit each row is visible exactly once.
        """
        self._require(sink.capabilities, "supports_prepare", "no invisible prepared state")
        files = sink_files(sink)
        current = sink
        for step in crash_steps(request, MAX_STEPS):
            epoch = current.fence(APP)
            batch = BatchRef(APP, step)
            rows = rows_for(APP, step, 0, 7)
            crash = CrashAt(files, step)
            with contextlib.suppress(SimulatedCrash), crash.armed():
                prepare(current, batch, epoch, 0, rows)
            after = self.reopen(ns, current)
            epoch = after.fence(APP)
            seen = self.visible(ns)
            assert sum(seen[k] for k in canon(rows)) == 0, f"crash at step {step}: rows visible"
            leftovers = (
                [c for c in after.recover(APP) if c.batch == batch] if after.capabilities.supports_recover else []
            )
            if leftovers:  # the crash came after the work became durable: it is in doubt, so abort it
                after.abort(leftovers)
            c = prepare(after, batch, epoch, 0, rows)
            after.commit(batch, [c], bundle_for(batch, epoch, [c]))
            seen = self.visible(ns)
            assert all(seen[k] == 1 for k in canon(rows)), f"crash at step {step}: rows not exactly once"
            current = after
            if not crash.fired:
                return
        pytest.fail(f"pre_commit did not finish within {MAX_STEPS} steps")

    def test_sigkill_after_pre_commit_then_recover_and_commit(self, sink: Sink[Any], ns: Namespace) -> None:
        """A real process prepares two shares and is SIGKILLed; another process recovers and commits them.

        How: the pickled sink goes to a Python subprocess that prepares two shares, hands back
        the committables and waits; it is killed with SIGKILL. Pass: nothing visible before the
        commit; ``recover`` in this process lists exactly the child's committables; after
        committing them every row is visible exactly once.
        """
        self._require(sink.capabilities, "supports_prepare", "prepared work does not outlive its process")
        epoch = sink.fence(APP)
        batch = BatchRef(APP, 0)
        shares = [rows_for(APP, 0, p, 5) for p in range(2)]
        job, out = ns.path / "child-job.pickle", ns.path / "child-out.pickle"
        job.write_bytes(pickle.dumps({"sink": sink, "batch": batch, "epoch": epoch, "shares": shares}))
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(job), str(out)], stdin=subprocess.PIPE, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 120
            while not out.exists():
                assert child.poll() is None, f"the child exited with {child.returncode} before preparing"
                assert time.monotonic() < deadline, "the child did not prepare within 120 s"
                time.sleep(0.02)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
        prepared: list[Committable] = pickle.loads(out.read_bytes())
        other = self.reopen(ns, sink)
        assert self.visible(ns) == Counter()
        if other.capabilities.supports_recover:
            assert sorted(c.id for c in other.recover(APP)) == sorted(c.id for c in prepared)
        other.commit(batch, prepared, bundle_for(batch, epoch, prepared))
        assert self.visible(ns) == canon([r for s in shares for r in s])

    # == the failure matrix at protocol level ==================================================

    def test_happy_path_every_batch_lands_once(self, variant: Variant, ns: Namespace) -> None:
        """Three batches through the real coordinator under this strategy land exactly once.

        Pass: the reader sees every row of every batch once; the last bundle is batch 2's with
        its fingerprint; nothing is left in doubt; no manifest is left.
        """
        driver = _Driver(self, ns, variant, _batches(variant))
        driver.run()
        driver.assert_exact()

    @pytest.mark.parametrize("point", ["F1", "F2", "F3", "F4", "F6", "F8"])
    def test_crash_at_a_fault_point_then_restart_is_exact(self, variant: Variant, ns: Namespace, point: str) -> None:
        """F1 (before begin), F2 (mid-write), F3 (after pre_commit), F4 (after the manifest), F6 (mid-commit:
        the sink's own point, which its ``commit`` passes once part of the batch is published and before
        its bundle is written), F8 (after commit).

        How: arm the point for batch 1, run until the crash, restart from configuration and
        run to the end (Spark replays what it did not commit). Pass: the point fired, in every
        strategy; then exactly once, as in the happy path.
        """
        faults.configure(f"{point}@1:raise")
        driver = _Driver(self, ns, variant, _batches(variant))
        driver.crash()
        driver.restart()
        driver.run()
        driver.assert_exact()

    def test_f2_leftovers_of_a_crashed_writer_stay_invisible(self, variant: Variant, ns: Namespace) -> None:
        """F2: rows a crashed participant wrote before pre_commit never become visible.

        How: crash batch 0 mid-write; look; restart and run. Pass: nothing visible after the
        crash (transactional strategies); exactly once at the end.
        """
        faults.configure("F2@0:raise")
        driver = _Driver(self, ns, variant, _batches(variant))
        driver.crash()
        if variant.transactional:
            assert self.visible(ns) == Counter()
        driver.restart()
        driver.run()
        driver.assert_exact()

    def test_f5_two_phase_commit_rolls_forward_after_spark_committed(self, sink: Sink[Any], ns: Namespace) -> None:
        """F5 (2PC): the driver dies after Spark's commit log but before the sink's commit; recovery rolls forward.

        Pass: after the restart (with no replay: Spark committed the batch) the batch is
        visible exactly once.
        """
        variant = next(v for v in VARIANTS if v.two_pc)
        self._require(sink.capabilities, "supports_prepare", "two-phase commit needs prepare")
        faults.configure("F5@1:raise")
        driver = _Driver(self, ns, variant, _batches(variant))
        driver.crash()
        driver.restart()
        driver.run()
        driver.assert_exact()

    def test_f7_lost_commit_reply_is_resolved_by_status(self, variant: Variant, ns: Namespace) -> None:
        """F7: the commit happened but its reply was lost; ``commit_status`` settles it without a restart.

        Pass: the run finishes, exactly once, and the coordinator counted one ambiguous commit.
        """
        faults.configure("F7@1:ambiguous")
        driver = _Driver(self, ns, variant, _batches(variant))
        driver.run()
        driver.assert_exact()
        assert driver.coordinator.stats.ambiguous_commits == 1

    def test_f9_crash_during_recovery_then_again(self, variant: Variant, ns: Namespace) -> None:
        """F9: a driver crashes while recovering another's crash; the next recovery finishes the job.

        How: crash at F4 of batch 1, restart with F9 armed (crash in recovery), restart again.
        Pass: exactly once.
        """
        faults.configure("F4@1:raise")
        driver = _Driver(self, ns, variant, _batches(variant))
        driver.crash()
        driver.restart("F9:raise")
        with contextlib.suppress(InjectedFault):
            driver.run()
        driver.restart()
        driver.run()
        driver.assert_exact()

    def test_f10_zombie_writer_is_fenced(self, variant: Variant, ns: Namespace) -> None:
        """F10: an old driver that wakes up after a new one took over cannot commit.

        How: the old driver prepares batch 1 (its manifest written, F4) and freezes; a new driver
        starts and fences; the old one wakes and commits its batch, prepared and non-empty, with
        its own epoch; then the new driver recovers and finishes. Pass: the old driver's commit
        raises FencedError and publishes nothing; exactly once at the end.
        """
        faults.configure("F4@1:raise")
        driver = _Driver(self, ns, variant, _batches(variant))
        driver.crash()
        zombie = driver.coordinator
        batch = BatchRef(APP, 1)
        manifest = driver.ckpt.spark().read_manifest(APP, 1)  # its bundle carries the zombie's epoch
        assert manifest is not None and manifest.committables, "the zombie must hold real, prepared work"
        driver.restart()
        driver.coordinator.sink.fence(APP)  # the new driver's start: fenced, not yet recovered
        visible = self.visible(ns)
        with pytest.raises(FencedError):
            zombie.sink.commit(batch, manifest.committables, manifest.bundle)
        assert self.visible(ns) == visible, "the fenced commit published something"
        driver.run()
        driver.assert_exact()

    def test_f11_failed_and_speculative_attempts_are_aborted(self, variant: Variant, ns: Namespace) -> None:
        """F11: a task attempt that failed after pre_commit, and a losing speculative duplicate, leave nothing.

        How: participant 0 of each batch runs twice (the second attempt's committable is
        dropped, as Spark drops a losing speculative task), and a task fails after pre_commit
        once and is retried. Pass: exactly once; nothing left for ``recover``.
        """
        faults.configure("F11@1:raise")
        driver = _Driver(self, ns, variant, _batches(variant, speculative={0: 1}, task_retries=1))
        driver.run()
        driver.assert_exact()

    def test_f13_divergent_replay_of_a_committed_batch(self, variant: Variant, ns: Namespace) -> None:
        """F13: a replay with different data of a batch the sink already committed.

        How: txid-check and idempotent commit batch 1, then crash before Spark's commit log
        (F8); 2PC crashes after its manifest (F4), before anything is committed. The restart
        replays batch 1 with other rows. Pass: txid-check and idempotent stop with
        NonDeterministicReplayError naming the batch, and the sink keeps the first version (its
        stored bundle carries the first version's fingerprint, as the coordinator computed it);
        2PC (which never commits before Spark did) ends exactly with the replayed data.
        """
        faults.configure("F4@1:raise" if variant.two_pc else "F8@1:raise")
        batches = _batches(variant)
        driver = _Driver(self, ns, variant, batches)
        driver.crash()
        driver.restart()
        driver.batches[1] = MemoryBatch(make_rows(1, duplicate=not variant.user_keys, salt="-replayed"))
        if variant.two_pc:
            driver.run()
            driver.assert_exact()
            return
        stored = self.reopen(ns).fetch_last_bundle(APP)
        assert stored is not None and stored.batch.batch_id == 1
        assert stored.fingerprint == batches[1].expected_fingerprint(), "the bundle does not keep the fingerprint"
        with pytest.raises(NonDeterministicReplayError) as info:
            driver.run()
        assert info.value.batch_id == 1
        assert self.visible(ns) == canon([r for b in batches[:2] for r in b.rows])

    # == network faults through the fault proxy ================================================

    def _endpoint(self) -> tuple[str, int]:
        endpoint = self.harness.fault_endpoint()
        if endpoint is None:
            pytest.skip("capability: the harness declares no fault endpoint (the sink has no server to cut)")
        return endpoint

    def test_ambiguous_commit_through_the_proxy_is_resolved_by_status(self, ns: Namespace) -> None:
        """A COMMIT reaches the server but its reply is cut: the sink says ambiguous, the status says COMMITTED.

        How: a sink reaching its server through the fault proxy prepares a batch; the proxy
        cuts the connection after forwarding the commit request. Pass: ``commit`` raises
        AmbiguousCommitError (or TransientError); a new process's ``commit_status`` settles to
        COMMITTED; every row visible once; a repeated ``commit`` is harmless.
        """
        from eosink.services.proxy import FaultProxy

        host, port = self._endpoint()
        with FaultProxy(host, port, listen_port=self.harness.fault_proxy_port()) as proxy:
            sink = self.harness.make_sink_via(ns, "127.0.0.1", proxy.port)
            epoch = sink.fence(APP)
            batch, committables, rows = self.prepared_batch(sink, APP, 0, epoch)
            bundle = bundle_for(batch, epoch, committables)
            proxy.cut_after_request(self.harness.commit_request_marker)
            with pytest.raises((AmbiguousCommitError, TransientError)):
                sink.commit(batch, committables, bundle)
            assert proxy.stats.cuts >= 1
            with contextlib.suppress(Exception):
                sink.close()
        other = self.harness.make_sink(ns)
        assert settle_status(lambda: other.commit_status(batch, committables)) is CommitStatus.COMMITTED
        other.commit(batch, committables, bundle)
        assert self.visible(ns) == canon(rows)

    def test_a_commit_cut_after_any_of_its_requests_is_safe_to_retry(self, ns: Namespace) -> None:
        """TransientError, like AmbiguousCommitError, means "safe to retry; the outcome may be either".

        A sink raises TransientError for a failure whose request may have taken effect (a cut
        reply); the coordinator then retries the commit. So whatever a commit raises when its
        connection is cut after any one of its requests, the work must still be committable.
        How: through the fault proxy, batch k's ``commit`` is cut after its (k+1)-th request
        reached the server (its reply dropped), for k = 0, 1, ... until a commit completes
        before its cut. Pass, after each cut: the sink raised TransientError or
        AmbiguousCommitError, nothing else; a new process's ``commit_status`` settles to
        COMMITTED or PREPARED, never ABORTED (nothing was destroyed); committing again
        succeeds; every batch's rows are visible exactly once.
        """
        from eosink.services.proxy import FaultProxy

        host, port = self._endpoint()
        expected: list[dict[str, Any]] = []
        with FaultProxy(host, port, listen_port=self.harness.fault_proxy_port()) as proxy:
            sink = self.harness.make_sink_via(ns, "127.0.0.1", proxy.port)
            epoch = sink.fence(APP)
            for k in range(MAX_COMMIT_REQUESTS):
                batch, committables, rows = self.prepared_batch(sink, APP, k, epoch, shares=2)
                expected += rows
                bundle = bundle_for(batch, epoch, committables)
                cuts = len(proxy.stats.requests_cut)
                proxy.cut_after_request(b"", skip=k)
                try:
                    sink.commit(batch, committables, bundle)
                except (AmbiguousCommitError, TransientError):
                    assert len(proxy.stats.requests_cut) > cuts, "the commit failed without a cut"
                else:
                    proxy.passthrough()
                    if len(proxy.stats.requests_cut) == cuts:  # the commit took fewer requests: done
                        assert self.visible(ns) == canon(expected)
                        return
                    continue  # the cut hit after the commit's last reply (a later request): nothing to resolve
                proxy.passthrough()
                other = self.harness.make_sink(ns)
                status = settle_status(functools.partial(other.commit_status, batch, committables))
                assert status in (CommitStatus.COMMITTED, CommitStatus.PREPARED), (
                    f"batch {k}: its commit was cut after request {k + 1}, and commit_status says {status}: "
                    "a retryable failure must not destroy the work"
                )
                other.commit(batch, committables, bundle)
                with contextlib.suppress(Exception):
                    other.close()
                assert self.visible(ns) == canon(expected), f"batch {k}, cut after request {k + 1}"
        pytest.fail(f"a commit still had not completed before its cut after {MAX_COMMIT_REQUESTS} requests")

    def test_unreachable_server_raises_transient_error(self, ns: Namespace) -> None:
        """A server that refuses connections gives TransientError (retryable), not another error (F12).

        How: the fault proxy refuses connections; a new sink through it asks for the last
        bundle. Pass: TransientError; after ``passthrough`` the same call succeeds.
        """
        from eosink.services.proxy import FaultProxy

        host, port = self._endpoint()
        with FaultProxy(host, port, listen_port=self.harness.fault_proxy_port()) as proxy:
            proxy.refuse()
            sink = self.harness.make_sink_via(ns, "127.0.0.1", proxy.port)
            with pytest.raises(TransientError):
                sink.fetch_last_bundle(APP)
            proxy.passthrough()
            assert sink.fetch_last_bundle(APP) is None

    # == failover: the server's identity changes ==============================================

    @contextlib.contextmanager
    def _failover(self, ns: Namespace) -> Iterator[Failover]:
        failover = self.harness.failover(ns)
        if failover is None:
            pytest.skip("capability: the harness has no standby to fail over to (SinkHarness.failover)")
        try:
            yield failover
        finally:
            failover.close()

    def _other_app_batches(self, failover: Failover, count: int) -> list[dict[str, Any]]:
        """Another app_id commits ``count`` batches on the store: other writers, after a failover."""
        other = failover.make_sink()
        epoch = other.fence(OTHER_APP)
        rows: list[dict[str, Any]] = []
        for n in range(count):
            batch, committables, made = self.prepared_batch(other, OTHER_APP, n, epoch, base=500_000)
            other.commit(
                batch, committables, replace(bundle_for(batch, epoch, committables), follows=n - 1 if n else None)
            )
            rows += made
        with contextlib.suppress(Exception):
            other.close()
        return rows

    def test_a_lost_commit_reply_across_a_failover_is_settled_from_the_new_servers_records(self, ns: Namespace) -> None:
        """A commit whose reply is lost, then the server's identity changes: ``commit_status`` answers from the
        sink's own records on the new server, never from a handle the old server issued.

        How (a failover to an asynchronous standby): batch 0 is committed and batch 1 prepared; the
        standby stops following; batch 1's commit takes effect on the primary and its reply is lost;
        the primary dies and the standby is promoted; another app_id commits 8 batches there (taking
        the transaction ids the old server had handed out, as other writers would). Pass: the sink
        that lost the reply says PREPARED for batch 1 (its work reached the standby, its commit did
        not), never COMMITTED; committing it again makes batches 0 and 1 visible once each, and
        batch 1 is the app_id's last bundle.
        """
        with self._failover(ns) as failover:
            sink = failover.make_sink()
            epoch = sink.fence(APP)
            batch0, committables0, rows0 = self.prepared_batch(sink, APP, 0, epoch)
            sink.commit(batch0, committables0, bundle_for(batch0, epoch, committables0))
            batch1, committables1, rows1 = self.prepared_batch(sink, APP, 1, epoch)
            bundle1 = replace(bundle_for(batch1, epoch, committables1), follows=0)
            failover.stop_standby()
            failover.commit_losing_reply(sink, batch1, committables1, bundle1)
            failover.promote_standby()
            sink.close()  # a failover breaks every connection; what the sink remembers stays
            others = self._other_app_batches(failover, 8)
            status = settle_status(lambda: sink.commit_status(batch1, committables1))
            assert status is CommitStatus.PREPARED, (
                f"batch 1's commit never reached the promoted standby, which holds its prepared work, yet "
                f"commit_status says {status}"
            )
            sink.commit(batch1, committables1, bundle1)
            assert self.visible(ns) == canon(rows0 + rows1 + others)
            last = failover.make_sink().fetch_last_bundle(APP)
            assert last is not None and last.batch.batch_id == 1

    def test_committed_batches_lost_in_a_failover_stop_the_next_commit(self, ns: Namespace) -> None:
        """A server that drops batches it acknowledged (a failover to a standby that lacked them) is caught at the
        next commit, before that batch becomes visible on top of the gap.

        How: batch 0 is committed; the standby stops following; batch 1 is committed and acknowledged;
        the standby is promoted; batch 2, whose bundle follows batch 1, is prepared and committed; and,
        where the sink upserts by key, a participant of batch 2 whose rows would be visible at once
        (``transactional=False``, ``TaskRef.follows`` 1) begins. Pass: the commit raises
        CommittedWorkLostError naming batch 1 (``batches == (1,)``), and so does that participant before
        its first row; nothing of batch 2 is visible; the app_id's last bundle is batch 0's.
        """
        with self._failover(ns) as failover:
            sink = failover.make_sink()
            epoch = sink.fence(APP)
            batch0, committables0, rows0 = self.prepared_batch(sink, APP, 0, epoch)
            sink.commit(batch0, committables0, bundle_for(batch0, epoch, committables0))
            failover.stop_standby()
            batch1, committables1, _ = self.prepared_batch(sink, APP, 1, epoch)
            sink.commit(batch1, committables1, replace(bundle_for(batch1, epoch, committables1), follows=0))
            failover.promote_standby()
            sink.close()
            batch2, committables2, _ = self.prepared_batch(sink, APP, 2, epoch)
            bundle2 = replace(bundle_for(batch2, epoch, committables2), follows=1)
            with pytest.raises(CommittedWorkLostError) as lost:
                settle_commit(lambda: sink.commit(batch2, committables2, bundle2))
            assert lost.value.batches == (1,), lost.value.batches
            if sink.capabilities.supports_keys:  # the idempotent strategy's participants: visible as they write
                keyed = rows_for(APP, 2, 1, 4)
                with pytest.raises(CommittedWorkLostError) as refused:
                    prepare(sink, batch2, epoch, 1, keyed, upsert_keys=("id",), transactional=False, follows=1)
                assert refused.value.batches == (1,), refused.value.batches
            assert self.visible(ns) == canon(rows0)
            last = failover.make_sink().fetch_last_bundle(APP)
            assert last is not None and last.batch.batch_id == 0

    # == random schedules ======================================================================

    def test_random_schedules_keep_committed_content_exact(
        self, tmp_path: Path, request: pytest.FixtureRequest
    ) -> None:
        """Rule: whatever the interleaving, the sink's state is the model's after every operation.

        How: three fixed schedules (two app_ids interleaved; a second attempt alive at commit;
        batch ids and epochs past 10), then hypothesis draws, derandomized (the same schedules
        every run), up to 30 operations each over batches 0, 1, 2, 9, 10 and 11 of two app_ids:
        prepare a batch (one or two shares), another attempt of a prepared share, commit, abort,
        crash (drop the sink, reopen from configuration, fence again), and a writer one epoch
        behind that tries to prepare and to commit. ``--eosink-contract-examples=N`` sets the
        number of drawn schedules (default 60). Pass, after every operation: the visible content
        is exactly the rows of the committed batches; ``recover`` lists exactly the model's
        in-doubt committables of each app_id; ``fetch_last_bundle`` is the bundle of the
        app_id's highest committed batch; ``commit_status`` of every prepared and committed
        batch matches; the stale writer gets FencedError.
        """
        from eosink.contracts._schedules import examples_option, run_schedules

        run_schedules(self.harness, tmp_path, self.reopen, self.visible, examples_option(request))

    # -- not a case: a guard for suite authors ------------------------------------------------

    @classmethod
    def case_names(cls) -> list[str]:
        """Every case of the suite, in definition order."""
        return [name for name in vars(SinkContract) if name.startswith("test_")]
