"""Protocol-level tests of the fan-out (eosink.fanout): one batch, two reference sinks, exactly once in each,
committed in order.

Sink "a" commits before sink "b". Sink "b" is an :class:`OrderedSink`: every commit it makes (inline,
after Spark's commit log, or rolling forward at recovery) first asserts that sink "a" already holds the
batch, so each test below also checks the order promise at every commit. A crash is an InjectedFault at
a fault point; the restarted driver is a new FanOut over new sink objects on the same files and
checkpoint, as in test_coordinator.py.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from unit_conftest import APP, FAST, NON_2PC, VARIANTS, FakeCheckpoint, MemoryBatch, Variant, batches_for, canon

import eosink
from eosink import faults
from eosink.connectors.reference import ReferenceSink
from eosink.contract import BatchRef, Bundle, Committable
from eosink.contracts._mini import run_in_spark_order
from eosink.errors import (
    BadRecordError,
    ConfigurationError,
    InjectedFault,
    NonDeterministicReplayError,
    PreparedWorkLostError,
)
from eosink.fanout import FanOut, member_app_id, name_sinks
from eosink.spark import BatchWriter, FanOutWriter

NAMES = ("a", "b")


class OrderedSink(ReferenceSink):
    """A reference sink that refuses (AssertionError) to commit a batch that sink ``before`` does not hold."""

    def __init__(self, path: Path, before: Path, before_app: str) -> None:
        super().__init__(path)
        self.before, self.before_app = before, before_app
        self.commits: list[int] = []

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        reader = ReferenceSink(self.before)
        try:
            held = {b.batch.batch_id for b in reader.bundles(self.before_app)}
        finally:
            reader.close()
        assert batch.batch_id in held, f"sink b commits batch {batch.batch_id} before sink a holds it ({held})"
        self.commits.append(batch.batch_id)
        super().commit(batch, committables, bundle)


class MiniFanOut:
    """Spark's order of events around a FanOut of sinks "a" then "b" (see tests/unit/conftest.py MiniSpark)."""

    def __init__(self, root: Path, variant: Variant, batches: Sequence[MemoryBatch]) -> None:
        self.variant = variant
        self.batches = list(batches)
        self.dbs = {name: root / f"{name}.db" for name in NAMES}
        self.ckpt = FakeCheckpoint(root / "checkpoint")
        self.fanout = self.new()

    def new(self) -> FanOut:
        a = ReferenceSink(self.dbs["a"])
        b = OrderedSink(self.dbs["b"], self.dbs["a"], member_app_id(APP, "a"))
        return FanOut([("a", a), ("b", b)], APP, self.variant.make(), self.ckpt.spark(), FAST, threaded=False)

    def sink(self, name: str) -> Any:
        return self.fanout.coordinators[NAMES.index(name)].sink

    def run(self) -> None:
        """Every batch Spark has not committed, in order; then make sure recovery ran."""
        run_in_spark_order(self.fanout, self.ckpt, self.batches, two_pc=self.variant.two_pc)

    def crash(self, spec: str, error: type[BaseException] = InjectedFault) -> BaseException:
        faults.configure(spec)
        with pytest.raises(error) as info:
            self.run()
        faults.reset()
        return info.value

    def restart(self) -> None:
        for coordinator in self.fanout.coordinators:
            coordinator.sink.close()  # a dead driver commits nothing more
        self.fanout = self.new()

    def lose_work(self, name: str) -> None:
        """Abort sink ``name``'s in-doubt work by hand (a transaction timeout, an operator)."""
        sink = ReferenceSink(self.dbs[name])
        try:
            sink.abort(sink.recover(member_app_id(APP, name)))
        finally:
            sink.close()

    def give_up(self, name: str, batch_id: int) -> None:
        """Sink ``name`` forgets its recorded batch: its work aborted, its manifest removed."""
        self.lose_work(name)
        self.ckpt.spark().delete_manifest(member_app_id(APP, name), batch_id)

    def rows(self, name: str) -> Counter[str]:
        reader = ReferenceSink(self.dbs[name])
        try:
            return canon(reader.rows(member_app_id(APP, name)))
        finally:
            reader.close()

    def expected(self) -> Counter[str]:
        return canon([r for b in self.batches for r in b.rows])

    def assert_exact(self) -> None:
        """Each sink holds every batch once, one bundle per batch, nothing in doubt, no manifest left."""
        for name in NAMES:
            app = member_app_id(APP, name)
            reader = ReferenceSink(self.dbs[name])
            try:
                assert canon(reader.rows(app)) == self.expected(), name
                assert [b.batch.batch_id for b in reader.bundles(app)] == list(range(len(self.batches))), name
                assert reader.recover(app) == [], name
            finally:
                reader.close()
            assert self.ckpt.spark().manifest_batches(app) == [], name


def mini(tmp_path: Path, variant: Variant, n: int = 3) -> MiniFanOut:
    return MiniFanOut(tmp_path, variant, batches_for(variant, n))


def test_every_batch_lands_once_in_each_sink_in_one_pass(tmp_path: Path, variant: Variant) -> None:
    """Three batches into sinks a and b.

    Pass: exact in both sinks, each under its own app_id; each batch's data was written in one pass
    (one write_many per batch, no fingerprint pass); b committed batches 0, 1, 2 each after a held it."""
    ms = mini(tmp_path, variant)
    ms.run()
    ms.assert_exact()
    assert [b.writes for b in ms.batches] == [1, 1, 1]
    assert [b.fingerprints for b in ms.batches] == [0, 0, 0]
    assert ms.sink("b").commits == [0, 1, 2]
    assert {name: s.batches_committed for name, s in ms.fanout.stats.items()} == {"a": 3, "b": 3}


def test_two_pc_commits_nothing_before_sparks_commit_log(tmp_path: Path) -> None:
    """2pc: batch 0 processed, no commits/0 yet.

    Pass: neither sink shows a row; after commits/0 one commit_ready commits batch 0 in a, then in b."""
    ms = mini(tmp_path, VARIANTS[0], n=1)
    ms.ckpt.write_offsets(0)
    ms.fanout.process(0, ms.batches[0])
    assert ms.fanout.commit_ready() == 0
    assert (ms.rows("a"), ms.rows("b")) == (Counter(), Counter())
    ms.ckpt.write_commit(0)
    assert ms.fanout.commit_ready() == 1
    ms.assert_exact()


POINTS_2PC = ["F3", "F4", "F5", "F6", "F8", "F14", "F9"]
POINTS_INLINE = ["F3", "F4", "F6", "F8", "F14", "F9"]


@pytest.mark.parametrize(
    ("variant", "point"),
    [pytest.param(VARIANTS[0], p, id=f"2pc-{p}") for p in POINTS_2PC]
    + [pytest.param(v, p, id=f"{v.id}-{p}") for v in NON_2PC for p in POINTS_INLINE],
)
def test_a_crash_at_any_point_ends_exact_in_both_sinks_in_order(tmp_path: Path, variant: Variant, point: str) -> None:
    """A crash at ``point`` of batch 1 (F9: during the recovery after a crash at F4 of batch 1), then a restart.

    Pass: the restarted driver ends exact in both sinks; b never committed a batch a did not hold (the
    OrderedSink assertion inside every commit, recovery's roll-forwards included)."""
    ms = mini(tmp_path, variant)
    if point == "F9":
        ms.crash("F4@1:raise")
        ms.restart()
    ms.crash(f"{point}@1:raise")
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_a_crash_between_the_sinks_rolls_the_second_forward_at_restart(tmp_path: Path) -> None:
    """2pc: Spark committed batch 1; the driver dies after a committed it, before b did (F14).

    Pass: after the crash a holds batches 0-1 and b only 0; the restart's recovery commits batch 1 in b
    (recovered_forward 1) without writing it again; exact."""
    ms = mini(tmp_path, VARIANTS[0])
    ms.crash("F14@1:raise")
    assert ms.ckpt.has_commit(1)
    assert [len(ReferenceSink(ms.dbs[n]).bundles(member_app_id(APP, n))) for n in NAMES] == [2, 1]
    ms.restart()
    ms.fanout.start()
    assert ms.fanout.stats["b"].recovered_forward == 1
    assert ms.batches[1].writes == 1
    ms.run()
    ms.assert_exact()


@pytest.mark.parametrize("variant", NON_2PC, ids=lambda v: v.id)
def test_a_replay_writes_only_the_sinks_that_lack_the_batch(tmp_path: Path, variant: Variant) -> None:
    """Inline strategies: the driver dies after a committed batch 1 and before b did (F14), and b's recorded
    batch is given up by hand (its work aborted, its manifest removed): Spark replays batch 1.

    Pass: the replay is one pass writing into b only (a's rows of batch 1 stay once); a skips it after the
    fingerprint check (replays_skipped 1); exact."""
    ms = mini(tmp_path, variant)
    ms.crash("F14@1:raise")
    ms.give_up("b", 1)
    ms.restart()
    ms.run()
    ms.assert_exact()
    assert ms.batches[1].writes == 2  # the first run's pass and the replay's
    assert ms.fanout.stats["a"].replays_skipped == 1
    assert ms.fanout.stats["b"].batches_committed == 2


@pytest.mark.parametrize("variant", [v for v in NON_2PC if v.transactional], ids=lambda v: v.id)
def test_a_replay_with_other_data_stops_before_the_lacking_sink_commits(tmp_path: Path, variant: Variant) -> None:
    """As above, but the replay of batch 1 carries other rows (a non-deterministic query); txid-check (under
    idempotent, written rows are visible at once, as with one sink).

    Pass: NonDeterministicReplayError naming batch 1; b shows nothing of the replay and nothing is in doubt
    in b (its written attempt aborted)."""
    ms = mini(tmp_path, variant)
    ms.crash("F14@1:raise")
    ms.give_up("b", 1)
    before = ms.rows("b")
    ms.batches[1] = MemoryBatch([{**r, "name": r["name"] + "-other"} for r in ms.batches[1].rows])
    ms.restart()
    err = ms.crash("F1@99:raise", NonDeterministicReplayError)
    assert isinstance(err, NonDeterministicReplayError) and err.batch_id == 1
    assert ms.rows("b") == before
    reader = ReferenceSink(ms.dbs["b"])
    assert reader.recover(member_app_id(APP, "b")) == []
    reader.close()


def test_lost_prepared_work_in_the_second_sink_names_it_and_leaves_the_first_alone(tmp_path: Path) -> None:
    """2pc: Spark committed batch 1; a committed it; b's prepared work of batch 1 vanished (aborted by hand).

    Pass: the restart stops with PreparedWorkLostError whose .sink is 'b', .batch_id 1, and whose text
    names sink 'b'; a still holds batches 0-1, once each."""
    ms = mini(tmp_path, VARIANTS[0])
    ms.crash("F14@1:raise")
    b_app = member_app_id(APP, "b")
    ms.lose_work("b")
    ms.restart()
    err = ms.crash("F1@99:raise", PreparedWorkLostError)
    assert isinstance(err, PreparedWorkLostError)
    assert (err.sink, err.batch_id, err.app_id) == ("b", 1, b_app)
    assert "sink 'b'" in err.problem
    reader = ReferenceSink(ms.dbs["a"])
    assert [b.batch.batch_id for b in reader.bundles(member_app_id(APP, "a"))] == [0, 1]
    reader.close()


class RefusingSink(ReferenceSink):
    """A reference sink that refuses every record, as a sink refuses a record too large for it."""

    def write(self, txn: Any, batch: Any) -> None:
        raise BadRecordError("A record is 2 MiB, over the sink's 1 MiB limit.", "Make records smaller.")


def test_a_sink_refusing_a_record_is_named_and_neither_sink_commits(tmp_path: Path) -> None:
    """Sink "b" refuses the batch's records inside its participants' lane.

    Pass: the BadRecordError says it is the fan-out's sink 'b' (two sinks could both refuse records) and
    keeps its fix; neither sink holds a bundle or in-doubt work afterwards."""
    variant = VARIANTS[0]
    sinks = [("a", ReferenceSink(tmp_path / "a.db")), ("b", RefusingSink(tmp_path / "b.db"))]
    ckpt = FakeCheckpoint(tmp_path / "checkpoint")
    fanout = FanOut(sinks, APP, variant.make(), ckpt.spark(), FAST, threaded=False)
    with pytest.raises(BadRecordError) as info:
        run_in_spark_order(fanout, ckpt, batches_for(variant, 1), two_pc=variant.two_pc)
    assert info.value.problem.startswith("Fan-out sink 'b': A record is 2 MiB")
    assert info.value.fix == "Make records smaller." and "Fan-out sink 'b'" in str(info.value)
    for name, sink in sinks:
        assert sink.bundles(member_app_id(APP, name)) == [] and sink.recover(member_app_id(APP, name)) == [], name
        sink.close()


@pytest.mark.parametrize("variant", [v for v in NON_2PC if v.transactional], ids=lambda v: v.id)
def test_inline_recovery_never_rolls_a_later_sink_past_an_earlier_one(tmp_path: Path, variant: Variant) -> None:
    """txid-check: both sinks recorded batch 1 and the driver died inside a's commit (F6, which the
    reference sink rolls back), then a's work of batch 1 vanished. (Idempotent work cannot vanish: its
    rows are visible once written, and its roll-forward only records the bundle.)

    Recovery of a gives batch 1 up (Spark replays it). Pass: recovery of b aborts its recorded batch 1
    too, instead of committing it ahead of a (the OrderedSink would fail); the replay lands both; exact."""
    ms = mini(tmp_path, variant)
    ms.crash("F6@1:raise")
    assert ms.ckpt.spark().manifest_batches(member_app_id(APP, "b")) == [1]
    ms.lose_work("a")
    ms.restart()
    ms.fanout.start()
    assert ms.fanout.stats["b"].recovered_aborted == 1
    assert ms.sink("b").commits == []
    ms.run()
    ms.assert_exact()


def test_sinks_are_named_by_connector_or_mapping(tmp_path: Path) -> None:
    """name_sinks: a list is named by connector; a mapping by its keys, in its order.

    Pass: ('reference', ...) from a list of one reference sink and another kind; two sinks of one
    connector in a list, one sink, a hostile name or a non-sink are ConfigurationErrors saying what to do."""
    a, b = ReferenceSink(tmp_path / "a.db"), ReferenceSink(tmp_path / "b.db")
    assert [n for n, _ in name_sinks({"ledger": a, "events": b})] == ["ledger", "events"]
    with pytest.raises(ConfigurationError, match="more than one sink named 'reference'") as info:
        name_sinks([a, b])
    assert info.value.fix and "mapping" in info.value.fix
    with pytest.raises(ConfigurationError, match="at least two sinks"):
        name_sinks([a])
    for hostile in ("x'; drop", "ledgér", "١٢"):  # quotes; non-ASCII letters and digits
        with pytest.raises(ConfigurationError, match="ASCII letters, digits"):
            name_sinks({"ledger": a, hostile: b})
    with pytest.raises(ConfigurationError, match="not an eosink Sink"):
        name_sinks({"ledger": a, "events": object()})  # type: ignore[dict-item]
    a.close()
    b.close()


def test_foreach_batch_gives_a_fan_out_writer_for_several_sinks(tmp_path: Path) -> None:
    """foreach_batch with one sink is a BatchWriter; with a mapping a FanOutWriter whose sinks keep their
    order and app_ids <app_id>.<name>.

    Pass: the types, the names in order, the member app_ids, and a repr naming each sink."""
    a, b = ReferenceSink(tmp_path / "a.db"), ReferenceSink(tmp_path / "b.db")
    one = eosink.foreach_batch(a, app_id=APP, checkpoint_location=tmp_path / "c1")
    assert isinstance(one, BatchWriter)
    two = eosink.foreach_batch({"ledger": a, "events": b}, app_id=APP, checkpoint_location=tmp_path / "c2")
    assert isinstance(two, FanOutWriter)
    assert [n for n, _ in two.sinks] == ["ledger", "events"]
    assert [c.app_id for c in two.fanout.coordinators] == [f"{APP}.ledger", f"{APP}.events"]
    assert "ledger=" in repr(two) and "events=" in repr(two)
    two.close()
    a.close()
    b.close()


def test_fan_out_writer_pickles_without_its_engine(tmp_path: Path) -> None:
    """Spark Connect pickles the foreachBatch function: a fan-out writer travels without its coordinators
    and their connections, and builds them again where it lands.

    Pass: the clone has no engine until used, then one of its own with the same sinks in order."""
    import pickle

    writer = eosink.foreach_batch(
        {"a": ReferenceSink(tmp_path / "a.db"), "b": ReferenceSink(tmp_path / "b.db")},
        app_id=APP,
        checkpoint_location=tmp_path / "c",
    )
    _ = writer.fanout
    clone = pickle.loads(pickle.dumps(writer))
    assert clone._engine is None
    assert clone.fanout is not writer.fanout
    assert clone.fanout.names == ["a", "b"]
    writer.close()
    clone.close()


# -- eosink status and eosink recover over the fan-out's sinks, side by side -----------------------------


def _cli(ms: MiniFanOut, command: str, *extra: str) -> tuple[int, str]:
    """``eosink COMMAND`` over sinks a and b (reference sinks) of the fan-out: its exit status and all it printed."""
    from eosink.cli.recover import main as recover
    from eosink.cli.status import main as status

    sinks = [
        *("--sink", "a=reference", "--path", str(ms.dbs["a"])),
        *("--sink", "b=reference", "--path", str(ms.dbs["b"])),
    ]
    argv = [*sinks, "--app-id", APP, "--checkpoint", str(ms.ckpt.root), *extra]
    run = status if command == "status" else recover
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = run(argv)
    return code, out.getvalue()


def test_status_and_recover_show_and_settle_the_sinks_side_by_side(tmp_path: Path) -> None:
    """2pc: the driver died between a's and b's commit of batch 1 (F14); then the operator's view.

    Pass: ``eosink status`` with both sinks exits 1, shows both member app_ids in one table and names b
    as behind (up to batch 0); ``recover --dry-run`` plans roll-forward of batch 1 in b only and changes
    nothing; ``recover --yes`` commits it there (exit 0); status then exits 0, every sink holding the same
    batches; --rewind with two sinks is a usage error naming the one-sink form."""
    ms = mini(tmp_path, VARIANTS[0])
    ms.crash("F14@1:raise")
    ms.restart()
    for coordinator in ms.fanout.coordinators:
        coordinator.sink.close()
    code, out = _cli(ms, "status")
    assert code == 1, out
    assert f"{APP}.a" in out and f"{APP}.b" in out
    assert "behind the newest batch 1: b (up to batch 0)" in out, out
    code, out = _cli(ms, "recover", "--dry-run")
    assert code == 0, out
    plan_b = out.split("sink 'b':")[1]
    assert "roll-forward" in plan_b and "roll-forward" not in out.split("sink 'b':")[0], out
    assert [len(ReferenceSink(ms.dbs[n]).bundles(member_app_id(APP, n))) for n in NAMES] == [2, 1]
    code, out = _cli(ms, "recover", "--yes")
    assert code == 0, out
    assert "1 batch(es) rolled forward" in out.split("sink 'b':")[1]
    code, out = _cli(ms, "status")
    assert code == 0 and "every sink holds the same batches" in out, out
    code, out = _cli(ms, "recover", "--rewind")
    assert code == 2 and "--rewind takes the one sink" in out


def test_a_restart_with_the_sinks_in_another_order_or_named_otherwise_is_refused(tmp_path: Path) -> None:
    """The first start records the sinks' names in commit order in the checkpoint.

    Pass: a restart with the sinks swapped (or one renamed) stops with ConfigurationError naming the recorded
    order, before anything is written; the CLI given them swapped exits 1 the same way; in order, it runs on."""
    ms = mini(tmp_path, VARIANTS[1])
    ms.crash("F1@1:raise")
    assert ms.ckpt.spark().read_fanout(APP) == ["a", "b"]
    a, b = ReferenceSink(ms.dbs["a"]), ReferenceSink(ms.dbs["b"])
    for sinks in ([("b", b), ("a", a)], [("a", a), ("c", b)]):
        swapped = FanOut(sinks, APP, VARIANTS[1].make(), ms.ckpt.spark(), FAST, threaded=False)
        with pytest.raises(ConfigurationError, match=r"sinks \['a', 'b'\] in this order") as info:
            swapped.start()
        assert info.value.fix and "['a', 'b']" in info.value.fix
    argv = [
        *("--sink", "b=reference", "--path", str(ms.dbs["b"])),
        *("--sink", "a=reference", "--path", str(ms.dbs["a"])),
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        from eosink.cli.status import main as status

        code = status([*argv, "--app-id", APP, "--checkpoint", str(ms.ckpt.root)])
    assert code == 1 and "in this order" in out.getvalue()
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_a_dry_run_of_txid_check_shows_the_later_sink_kept_behind(tmp_path: Path) -> None:
    """txid-check: both sinks recorded batch 1, the driver died inside a's commit (F6) and a's work vanished;
    the restart's recovery gave batch 1 up in a, then died before recovering b.

    Pass: ``recover --dry-run`` plans batch 1 in b as an abort (the sink before it holds batches up to 0
    only), not a roll-forward, and changes nothing; ``--yes`` then aborts it there and the replay lands
    every batch once in both sinks, in order."""
    ms = mini(tmp_path, VARIANTS[1])
    ms.crash("F6@1:raise")
    ms.lose_work("a")
    ms.restart()
    ms.fanout.coordinators[0].start()  # a's recovery: its roll-forward finds the work gone, Spark replays
    ms.restart()  # the driver dies before b's recovery
    for coordinator in ms.fanout.coordinators:
        coordinator.sink.close()
    code, out = _cli(ms, "recover", "--dry-run")
    assert code == 0, out
    plan_b = out.split("sink 'b':")[1]
    assert "abort" in plan_b and "roll-forward" not in plan_b and "holds batches up to 0 only" in plan_b, out
    assert ms.ckpt.spark().manifest_batches(member_app_id(APP, "b")) == [1]
    code, out = _cli(ms, "recover", "--yes")
    assert code == 0, out
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_a_run_with_no_new_batch_commits_what_spark_committed_in_order_at_close(tmp_path: Path) -> None:
    """2pc: the driver died between a's and b's commit of the last batch (F14 of batch 2); the restart finds
    no new input, so foreachBatch never runs and only ``close()`` can finish the batch.

    Pass: close commits batch 2 in b (a holds it: the OrderedSink lets it); exact."""
    ms = mini(tmp_path, VARIANTS[0])
    ms.crash("F14@2:raise")
    ms.restart()
    ms.fanout.finish_spark_committed()
    ms.fanout.close()
    assert ms.sink("b").commits == [2]
    ms.assert_exact()


def test_at_close_nothing_is_committed_after_a_sink_a_newer_writer_owns(tmp_path: Path) -> None:
    """2pc: the driver died at F5 of batch 2 (Spark committed it, no sink did); before the restarted writer
    closes, a newer writer fences sink a (and does nothing else yet).

    Pass: the close leaves batch 2 to the newer writer in a (fenced) and so commits nothing in b: b never
    shows batch 2 before a holds it."""
    ms = mini(tmp_path, VARIANTS[0])
    ms.crash("F5@2:raise")
    ms.restart()
    newer = ReferenceSink(ms.dbs["a"])
    newer.fence(member_app_id(APP, "a"))
    newer.close()
    ms.fanout.finish_spark_committed()
    ms.fanout.close()
    for name in NAMES:
        reader = ReferenceSink(ms.dbs[name])
        assert [b.batch.batch_id for b in reader.bundles(member_app_id(APP, name))] == [0, 1], name
        reader.close()


def test_a_replay_reuses_the_write_pass_fingerprint_in_its_version_and_takes_each_other_version_once() -> None:
    """The rule `foreach_batch`'s fan-out and `format("eosink")`'s tasks share (`replay_fingerprints`).

    Pass: a sink that writes gets None; a holder in the write pass's version gets that fingerprint, not a new
    one; holders in another version share one taken fingerprint; with no write pass every version is taken.
    """
    from eosink.contract import Fingerprint
    from eosink.fanout import replay_fingerprints

    asked: list[int] = []

    def take(version: int) -> Fingerprint:
        asked.append(version)
        return Fingerprint(rows=version, version=version)

    passed = Fingerprint(rows=5, version=2)
    got = replay_fingerprints([None, 2, 3, 3], passed, take)
    assert got[0] is None and got[1] is passed and got[2] is got[3] and got[2] == Fingerprint(rows=3, version=3)
    assert asked == [3]
    asked.clear()
    assert replay_fingerprints([1, 2], None, take) == [Fingerprint(rows=1, version=1), Fingerprint(rows=2, version=2)]
    assert asked == [1, 2]


def test_a_recover_before_the_first_start_still_leaves_the_order_recorded(tmp_path: Path) -> None:
    """``writer.recover()`` runs before Spark has created the checkpoint (nothing to record it in yet); then the
    query starts. Pass: the first batch records the sinks' order, so a restart that swaps them is refused."""
    ms = mini(tmp_path, VARIANTS[1])
    ms.ckpt = FakeCheckpoint(tmp_path / "fresh", metadata=False)
    ms.fanout = ms.new()
    ms.fanout.recover()
    assert ms.ckpt.spark().read_fanout(APP) is None  # no checkpoint yet
    (ms.ckpt.root / "metadata").write_text(json.dumps({"id": ms.ckpt.query_id}) + "\n")  # Spark starts the query
    ms.run()
    assert ms.ckpt.spark().read_fanout(APP) == ["a", "b"]
    ms.assert_exact()


def test_a_run_with_no_new_batch_and_the_sinks_swapped_commits_nothing(tmp_path: Path) -> None:
    """2pc: the driver died at F5 of batch 2 (Spark committed it, neither sink did); the restart, given the
    sinks in the other order, finds no new input, so only ``finish_spark_committed`` at close would commit.

    Pass: it stops with ConfigurationError naming the recorded order, and neither sink holds batch 2 (b must
    never show it before a); in order, the close commits it in both, exact."""
    ms = mini(tmp_path, VARIANTS[0])
    ms.crash("F5@2:raise")
    ms.restart()
    for coordinator in ms.fanout.coordinators:
        coordinator.sink.close()
    a, b = ReferenceSink(ms.dbs["a"]), OrderedSink(ms.dbs["b"], ms.dbs["a"], member_app_id(APP, "a"))
    swapped = FanOut([("b", b), ("a", a)], APP, VARIANTS[0].make(), ms.ckpt.spark(), FAST, threaded=False)
    with pytest.raises(ConfigurationError, match=r"sinks \['a', 'b'\] in this order"):
        swapped.finish_spark_committed()
    assert b.commits == []
    a.close()
    b.close()
    ms.restart()
    ms.fanout.finish_spark_committed()
    ms.fanout.close()
    ms.assert_exact()


def test_lost_work_in_the_second_sink_is_rewound_for_that_sink_and_lands_once_in_both(tmp_path: Path) -> None:
    """2pc: Spark committed batch 1, a committed it, b's prepared work of batch 1 vanished: the restart stops
    with PreparedWorkLostError naming b. The documented way on: ``eosink recover --rewind`` of b alone
    (``--app-id <app_id>.b``), then a restart.

    Pass: the rewind takes Spark's commit log back to batch 1; the restart's replay of batch 1 is skipped in
    a (it holds it) and written in b; every batch lands once in both sinks, in order."""
    from eosink.cli.recover import main as recover

    ms = mini(tmp_path, VARIANTS[0])
    ms.crash("F14@1:raise")
    ms.lose_work("b")
    ms.restart()
    ms.crash("F1@99:raise", PreparedWorkLostError)
    for coordinator in ms.fanout.coordinators:
        coordinator.sink.close()
    argv = ["--sink", "reference", "--path", str(ms.dbs["b"]), "--app-id", member_app_id(APP, "b")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = recover([*argv, "--checkpoint", str(ms.ckpt.root), "--rewind", "--yes"])
    assert code == 0 and "rewind to batch 1" in out.getvalue(), out.getvalue()
    assert not ms.ckpt.has_commit(1)
    ms.restart()
    ms.run()
    ms.assert_exact()
    assert ms.fanout.stats["a"].replays_skipped == 1
