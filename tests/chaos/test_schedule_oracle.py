"""The chaos harness's pure parts, without Spark: schedules, the oracle's checks, the reader's view check."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from eosink._driver import fired_faults
from eosink._procs import parse_error_line
from eosink._waiting import wait_until
from eosink.chaos.oracle import (
    Row,
    Workload,
    expected_rows,
    read_attempts,
    read_input,
    spark_batches,
    verify,
    verify_naive,
    write_input,
)
from eosink.chaos.reader import Reader
from eosink.chaos.report import format_table
from eosink.chaos.schedule import KILL_POINTS, make_schedule, naive_schedule, nondeterministic_schedule
from eosink.chaos.target import PrivateRoot, Snapshot, oracle_rows, snapshot_of
from eosink.profiles import SinkProfile, profiles

W = Workload(files=8, rows=12, keys=3, seed=5)


# -- schedules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", sorted(KILL_POINTS))
@pytest.mark.parametrize("kills", [2, 3])
def test_schedule_is_seeded_and_has_at_least_five_faults(strategy: str, kills: int) -> None:
    a = make_schedule(11, strategy, W, kills=kills)
    assert a == make_schedule(11, strategy, W, kills=kills)
    assert a.planned >= 5
    assert {f.kind for run in a.runs for f in run} == {
        "point-kill",
        "random-kill",
        "task-failure",
        "commit-cut",
        "sink-restart",
    }
    assert a.runs[-1] == (), "the last run finishes the input without faults"
    for run in a.runs:
        terminal = [f for f in run if f.terminal]
        assert len(terminal) <= 1 and (not terminal or run[-1] is terminal[0]), run
        for f in run:
            if f.kind == "point-kill":
                assert f.point in KILL_POINTS[strategy]
            if f.kind == "task-failure" and run[-1].kind == "point-kill":
                assert f.offset < run[-1].offset, "the task failure must come before the run's kill"


def test_schedules_differ_by_seed_and_f5_is_2pc_only() -> None:
    assert len({make_schedule(s, "2pc", W).runs for s in range(10)}) > 1
    for s in range(30):
        for strategy in ("txid-check", "idempotent"):
            assert all(f.point != "F5" for run in make_schedule(s, strategy, W).runs for f in run)


def test_naive_schedule_keeps_only_the_kills() -> None:
    base = make_schedule(3, "2pc", W)
    naive = naive_schedule(base)
    assert naive.naive and len(naive.runs) == len(base.runs)
    kinds = [f.kind for run in naive.runs for f in run]
    assert sorted(kinds) == sorted(f.kind for run in base.runs for f in run if f.terminal)
    assert all(f.point == "F8" for run in naive.runs for f in run if f.kind == "point-kill")


def test_nondeterministic_schedules() -> None:
    txid = nondeterministic_schedule(1, "txid-check", W)
    assert txid.nondeterministic and txid.runs[0][0].point == "F8" and txid.runs[-1] == ()
    two = nondeterministic_schedule(1, "2pc", W)
    assert {f.point for run in two.runs for f in run} == {"F3", "F4", "F5", None}
    assert len(nondeterministic_schedule(1, "2pc", W, kills=2).runs) == 3


# -- the workload and the oracle ------------------------------------------------------------------------


def test_input_is_seeded_and_ordered_by_mtime(tmp_path: Path) -> None:
    write_input(tmp_path / "a", W)
    write_input(tmp_path / "b", W)
    a, b = read_input(tmp_path / "a"), read_input(tmp_path / "b")
    assert a == b and len(a) == W.files and all(len(rows) == W.rows for rows in a)
    files = sorted((tmp_path / "a").iterdir())
    assert [os.stat(f).st_mtime for f in files] == sorted(os.stat(f).st_mtime for f in files)
    seqs = [r["seq"] for rows in a for r in rows]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def _batches() -> list[list[dict[str, object]]]:
    def r(key: str, seq: int, token: str, amount: int) -> dict[str, object]:
        return {"id": seq, "key": key, "seq": seq, "token": token, "amount": amount}

    return [
        [r("x", 2, "b", 5), r("x", 1, "a", 1), r("y", 3, "c", 2)],
        [r("y", 4, "d", 3)],
        [r("x", 5, "e", 7), r("x", 6, "f", 1)],
    ]


def test_expected_rows_is_the_failure_free_execution() -> None:
    want = expected_rows(_batches())
    assert want == {
        (0, "x"): (0, "x", 6, "a.b", 2),
        (0, "y"): (0, "y", 2, "c", 1),
        (1, "y"): (1, "y", 5, "c.d", 2),
        (2, "x"): (2, "x", 14, "a.b.e.f", 4),
    }


def test_verify_accepts_exactly_the_execution_and_counts_what_is_wrong() -> None:
    batches = _batches()
    good = list(expected_rows(batches).values())
    assert verify(good, batches).ok
    lost = verify(good[1:], batches)
    assert lost.lost == 1 and not lost.ok
    dup = verify([*good, good[0]], batches)
    assert dup.duplicated == 1 and not dup.ok
    wrong = [(0, "x", 6, "b.a", 2), *good[1:]]  # a valid order within the batch, but not the deterministic one
    assert verify(wrong, batches).mismatched == 1


def test_verify_finds_a_divergent_chain() -> None:
    """Batch 0 committed "b.a", batch 2 extends "a.b": two executions mixed (the seed paper's example)."""
    batches = _batches()
    mixed: list[Row] = [
        (0, "x", 6, "b.a", 2),
        (0, "y", 2, "c", 1),
        (1, "y", 5, "c.d", 2),
        (2, "x", 14, "a.b.e.f", 4),
    ]
    v = verify(mixed, batches, deterministic=False)
    assert v.chain_breaks == 1 and not v.ok
    consistent = [(0, "x", 6, "b.a", 2), *mixed[1:3], (2, "x", 14, "b.a.f.e", 4)]
    assert verify(consistent, batches, deterministic=False).ok


def test_verify_upto_and_incomplete_keys() -> None:
    batches = _batches()
    good = list(expected_rows(batches).values())
    upto0 = [r for r in good if r[0] == 0]
    assert verify(upto0, batches, upto=0).ok
    assert verify(good, batches, upto=0).duplicated == 2, "rows after the stop are unexpected"
    assert not verify(upto0, batches).ok


def test_verify_checks_one_attempt_per_batch(tmp_path: Path) -> None:
    batches = _batches()
    good = list(expected_rows(batches).values())
    log = tmp_path / "oracle.jsonl"
    lines = []
    for b in range(3):
        rows = [[k, s, c, n] for (bb, k, s, c, n) in good if bb == b]
        lines.append(json.dumps({"attempt": "a", "batch": b, "rows": rows}))
    lines.append(json.dumps({"attempt": "b", "batch": 1, "rows": [["y", 5, "c.d", 2]]}))
    log.write_text("\n".join(lines) + '\n{"attempt": "c", "ba')  # a torn last line (a kill)
    attempts = read_attempts([log, tmp_path / "missing.jsonl"])
    assert sorted(attempts) == [0, 1, 2] and len(attempts[1]) == 1
    assert verify(good, batches, attempts=attempts).ok
    forged = [r if r[:2] != (0, "y") else (0, "y", 2, "c", 1) for r in good]
    del attempts[0]
    assert verify(forged, batches, attempts=attempts).not_an_attempt == 1


def test_verify_naive_counts_multisets() -> None:
    batches = _batches()
    good = list(expected_rows(batches).values())
    v = verify_naive([*good[1:], good[1], good[1]], batches)
    assert (v.lost, v.duplicated) == (1, 2)
    assert verify_naive(good[1:], batches).lost == 1


# -- the reader and the runner's helpers -------------------------------------------------------------------


def test_reader_check_finds_partial_batches() -> None:
    reader = Reader(lambda: None, {0: 2, 1: 3}.get, atomic=True)
    assert reader.check(Snapshot({0: 2, 1: 3}, frozenset({0, 1}))) == []
    assert reader.check(Snapshot({0: 2}, frozenset({0}))) == []
    assert reader.check(Snapshot({0: 2, 1: 1}, frozenset({0}))) == ["batch 1: 1 of 3 rows visible"]
    assert reader.check(Snapshot({0: 2}, frozenset())) == ["batch 0: all rows visible, no bundle"]
    assert reader.check(Snapshot({}, frozenset({1}))) == ["batch 1: bundle without rows"]


def test_records_read_back_become_oracle_rows_and_snapshots() -> None:
    """Pass: records as a Parquet or JSON reader returns them (other columns ignored) become the oracle's
    typed rows, and a snapshot counts them per batch beside the bundles (None: no bundles)."""
    records = [
        {"batch_id": 0, "key": "a", "running_sum": 3, "concat": "x", "n_tokens": 1, "extra": 9},
        {"batch_id": 1, "key": 7, "running_sum": 5, "concat": "x.y", "n_tokens": 2},
        {"batch_id": 1, "key": "b", "running_sum": 1, "concat": "z", "n_tokens": 1},
    ]
    assert oracle_rows(records) == [(0, "a", 3, "x", 1), (1, "7", 5, "x.y", 2), (1, "b", 1, "z", 1)]
    assert snapshot_of(records, frozenset({1})) == Snapshot({0: 1, 1: 2}, frozenset({1}))
    assert snapshot_of([], None) == Snapshot({}, frozenset())


def test_a_private_root_closes_the_server_it_serves(tmp_path: Path) -> None:
    """Pass: serve() starts the server made on the root; close() closes it and removes an own root, not a given one."""

    class Server:
        def __init__(self, root: Path) -> None:
            self.root = root
            self.events: list[str] = []

        def start(self) -> None:
            self.events.append("start")

        def close(self) -> None:
            self.events.append("close")

    given = PrivateRoot(tmp_path, "x-")
    server = given.serve(Server)
    assert server.root == tmp_path and server.events == ["start"]
    given.close()
    assert server.events == ["start", "close"] and tmp_path.exists()
    own = PrivateRoot(None, "eosink-test-")
    server = own.serve(Server)
    assert server.root.exists()
    own.close()
    own.close()  # once only
    assert server.events == ["start", "close"] and not server.root.exists()


def test_reader_counts_partial_views_in_a_thread() -> None:
    snaps = iter([None, Snapshot({0: 1}, frozenset())] + [Snapshot({0: 2}, frozenset({0}))] * 1000)
    with Reader(lambda: next(snaps), {0: 2}.get, atomic=False) as reader:
        import time

        deadline = time.monotonic() + 10
        while reader.polls < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert reader.polls >= 3 and reader.unavailable == 1
    assert (reader.partial_reads, reader.partial_views) == (0, 1)
    assert reader.examples == ["batch 0: 1 of 2 rows visible"]


def test_error_and_fault_log_parsing(tmp_path: Path) -> None:
    stderr = "noise\nEOSINK-ERROR NonDeterministicReplayError: Batch 3 of app_id 'x' was replayed\n"
    kind, text = parse_error_line(stderr)
    assert kind == "NonDeterministicReplayError" and text and text.startswith("NonDeterministicReplayError: Batch 3")
    assert parse_error_line("") == (None, None)
    assert parse_error_line("x" * 2000 + "the end") == (None, ("x" * 2000 + "the end")[-1500:])
    log = tmp_path / "faults.log"
    log.write_text("F8 3 kill 123\nF2 4 raise 456\n")
    assert [str(f) for f in fired_faults(log)] == ["F8@3:kill", "F2@4:raise"]
    assert fired_faults(log)[0].point == "F8" and fired_faults(log)[1].action == "raise"
    assert fired_faults(tmp_path / "none.log") == []


def test_format_table() -> None:
    row = {
        "strategy": "2pc",
        "schedules": 2,
        "faults_injected": 12,
        "crashes": 6,
        "ambiguous_commits": 1,
        "replays_skipped": 0,
        "lost": 0,
        "duplicated": 0,
        "partial_reads": 0,
        "partial_views": 0,
        "divergent_replays_detected": 0,
        "failed": 0,
        "atomic": True,
    }
    report = {
        "results": [row, {**row, "strategy": "idempotent", "atomic": False, "partial_views": 4}],
        "naive": {"schedules": 2, "crashes": 6, "lost": 0, "duplicated": 9},
        "nondeterministic": [
            {"strategy": "txid-check", "ok": True, "divergent_replays_detected": 1, "detected_batch": 2},
        ],
    }
    text = format_table(report)
    assert "NonDeterministicReplayError at batch 2" in text
    lines = text.splitlines()
    assert lines[2].split()[8] == "-", "no partial-read count where atomicity is not declared"
    assert lines[3].split()[-1] == "9"


def test_happened_matches_what_the_runner_records() -> None:
    from eosink.chaos.runner import _happened
    from eosink.chaos.schedule import Fault

    injected = ["F8@3:kill", "F2@2:raise", "sink crash", "cut after COMMIT", "failover: a killed", "link cut: b"]
    assert _happened(Fault("failover"), injected) and _happened(Fault("link-cut"), injected)
    assert _happened(Fault("point-kill", point="F8"), injected)
    assert not _happened(Fault("point-kill", point="F3"), injected)
    assert _happened(Fault("task-failure", point="F2"), injected)
    assert _happened(Fault("sink-restart"), injected)
    assert _happened(Fault("commit-cut"), injected)
    assert not _happened(Fault("random-kill"), injected)
    assert _happened(Fault("random-kill"), ["random kill"])


def test_cli_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from eosink.chaos.cli import main

    assert main(["--schedules", "0"]) == 2
    assert "--schedules must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--strategy", "nope"])


def test_spark_batches_follow_the_offset_log(tmp_path: Path) -> None:
    """A crash between the file source's log and the offset log: the next run planned batch 1 over files 1 and 2."""
    files = [[{"f": i}] for i in range(5)]
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    for batch_id, log_offset in [(0, 0), (1, 2), (2, 3)]:
        (offsets / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{log_offset}}}\n')
    (offsets / ".3.abc.tmp").write_text("")
    assert spark_batches(tmp_path, files) == [[{"f": 0}], [{"f": 1}, {"f": 2}], [{"f": 3}], [{"f": 4}]]
    assert spark_batches(tmp_path / "none", files) == files


# -- parallel workers and the resumable journal -------------------------------------------------------


class _FakeTarget:
    """Counts servers started and stopped; the harness's runs are replaced below."""

    started: list[int] = []
    name = "fake"

    def start(self) -> None:
        _FakeTarget.started.append(1)

    def close(self) -> None:
        _FakeTarget.started.append(-1)

    def atomic(self, strategy: str) -> bool:
        return strategy != "idempotent"


class _FakeProfile(SinkProfile):
    name = "fake"
    title = "fake"
    summary = "a chaos target that counts its servers"

    def add_arguments(self, parser: Any) -> None:
        return None

    def admin(self, args: Any) -> Any:
        raise NotImplementedError

    def chaos_target(self, root: Path | None = None) -> Any:
        return _FakeTarget()


def _fake_run(calls: list[tuple[str, str, int]]) -> object:
    from eosink.chaos.results import ScheduleResult

    def run(self: object, schedule: object) -> ScheduleResult:
        s = schedule  # a Schedule
        mode = "naive" if s.naive else "nondeterministic" if s.nondeterministic else "eosink"  # type: ignore[attr-defined]
        calls.append((mode, s.strategy, s.seed))  # type: ignore[attr-defined]
        res = ScheduleResult(s.strategy, s.seed, mode, s.to_json())  # type: ignore[attr-defined]
        res.crashes, res.faults_injected = 3, 6
        if mode == "nondeterministic" and s.strategy == "txid-check":  # type: ignore[attr-defined]
            res.divergent_replays_detected, res.detected_batch = 1, 2
        return res

    return run


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_chaos_in_parallel_and_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    from eosink.chaos import runner

    monkeypatch.setitem(profiles(), "fake", _FakeProfile())
    calls: list[tuple[str, str, int]] = []
    monkeypatch.setattr(runner.ScheduleRunner, "run", _fake_run(calls))
    _FakeTarget.started = []
    kw = dict(seed=3, schedules=2, workload=W, workdir=tmp_path, jobs=jobs, say=lambda _: None)
    report = runner.run_chaos("fake", **kw)  # type: ignore[arg-type]
    # 2 schedules x (3 strategies + naive) + 2 non-deterministic, each run once, by `jobs` workers
    assert len(calls) == 10 and len(set(calls)) == 10
    assert _FakeTarget.started.count(1) == jobs and sum(_FakeTarget.started) == 0
    assert report["jobs"] == jobs and [r["schedules"] for r in report["results"]] == [2, 2, 2]
    assert [r["crashes"] for r in report["results"]] == [6, 6, 6]
    assert report["results"][1]["divergent_replays_detected"] == 1  # txid-check, from the non-deterministic mode
    assert [s["seed"] for s in report["schedules"] if s["mode"] == "eosink"] == [3, 4, 3, 4, 3, 4]

    # a run that stopped after 4 schedules resumes with the other 6, and reports all 10
    journal = sorted((tmp_path / "journal").iterdir())
    assert len(journal) == 10
    for path in journal[4:]:
        path.unlink()
    calls.clear()
    again = runner.run_chaos("fake", resume=True, **kw)  # type: ignore[arg-type]
    assert len(calls) == 6 and again["resumed"] == 4
    assert again["results"] == report["results"] and again["naive"] == report["naive"]

    # a journal entry for another schedule shape (here: another workload) is not reused
    calls.clear()
    other = dict(kw, workload=Workload(files=9, rows=12, keys=3, seed=5))
    runner.run_chaos("fake", resume=True, **other)  # type: ignore[arg-type]
    assert len(calls) == 10


def test_an_interrupted_parallel_run_starts_no_new_schedule_and_stops_its_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Ctrl-C (or SIGTERM, which eosink turns into the same unwinding) while two workers run schedules.

    Pass: KeyboardInterrupt comes out of run_chaos only after both running schedules finished (the first
    worker's takes a second longer: a run that returned early, leaving it to the interpreter's exit, failed
    here); no new schedule was taken after the interrupt; every worker's private server was stopped; the
    finished ones are journaled.
    """
    import signal
    import threading
    import time

    from eosink.chaos import runner

    monkeypatch.setitem(profiles(), "fake", _FakeProfile())
    calls: list[tuple[str, str, int]] = []
    fake = _fake_run(calls)
    pools: list[Any] = []
    real_init = runner._Pool.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        pools.append(self)

    both = threading.Barrier(2, timeout=60.0)  # generous bounds: a loaded machine is slow, never wrong
    finished: list[str] = []

    def run(self: object, schedule: object) -> Any:
        # the first schedule of each worker: once both run one, interrupt the main thread; finish once it
        # stopped the pool
        if both.wait() == 0:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        assert wait_until(lambda: not pools[0].todo, 60.0), "the interrupted pool still takes schedules"
        if threading.current_thread().name == "chaos-0":
            time.sleep(1.0)  # a schedule still running: its length, not a synchronisation
        finished.append(threading.current_thread().name)
        return fake(self, schedule)

    monkeypatch.setattr(runner._Pool, "__init__", init)
    monkeypatch.setattr(runner.ScheduleRunner, "run", run)
    _FakeTarget.started = []
    # A run started in the background by a shell without job control inherits SIGINT ignored (and Python then
    # keeps it so): Ctrl-C's handler is what this test is about, so it is installed here, whatever was inherited.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, inherited))
    with pytest.raises(KeyboardInterrupt):
        runner.run_chaos("fake", seed=3, schedules=2, workload=W, workdir=tmp_path, jobs=2, say=lambda _: None)
    assert sorted(finished) == ["chaos-0", "chaos-1"]  # both running schedules ended before run_chaos did
    assert len(calls) == 2, calls  # the schedules running at the interrupt, of 10 planned
    assert _FakeTarget.started.count(1) >= 1 and sum(_FakeTarget.started) == 0  # every started server stopped
    assert len(list((tmp_path / "journal").iterdir())) == len(calls)


def test_schedule_result_round_trips_through_json() -> None:
    from eosink.chaos.results import RunRecord, ScheduleResult

    res = ScheduleResult("2pc", 7, "eosink", {"seed": 7}, crashes=2, verdict={"lost": 0, "duplicated": 1})
    res.runs.append(RunRecord(0, ["kill at F3 (+1 batches)"], "F3@1:kill", outcome="killed", injected=["F3@1:kill"]))
    back = ScheduleResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back == res and back.duplicated == 1 and back.ok


def _report(results: list[Any], sink: str) -> dict[str, Any]:
    from eosink.chaos.report import build_report

    return build_report(
        results,
        sink=sink,
        seed=1,
        schedules=1,
        kills=3,
        workload=W,
        master="local[2]",
        strategies=["2pc"],
        atomic=lambda _: True,
        duration_s=1.0,
        jobs=1,
        resumed=0,
    )


def test_report_breaks_a_fanouts_counts_down_by_sink() -> None:
    from eosink.chaos.results import ScheduleResult

    def result(mode: str, seed: int, postgres: tuple[int, int], kafka: tuple[int, int]) -> ScheduleResult:
        sinks = {
            name: {"lost": lost, "duplicated": dup} for name, (lost, dup) in (("postgres", postgres), ("kafka", kafka))
        }
        total = {"lost": postgres[0] + kafka[0], "duplicated": postgres[1] + kafka[1], "sinks": sinks}
        return ScheduleResult(strategy="2pc", seed=seed, mode=mode, schedule={}, verdict=total)

    naive = [result("naive", 1, (0, 7), (0, 0)), result("naive", 2, (0, 3), (1, 5))]
    report = _report([result("eosink", 1, (0, 0), (0, 0)), *naive], "postgres+kafka")
    assert report["naive"]["duplicated"] == 15
    assert report["naive"]["sinks"] == {
        "postgres": {"lost": 0, "duplicated": 10},
        "kafka": {"lost": 1, "duplicated": 5},
    }
    assert report["results"][0]["sinks"] == {
        "postgres": {"lost": 0, "duplicated": 0},
        "kafka": {"lost": 0, "duplicated": 0},
    }
    text = format_table(report)
    assert "naive by sink: postgres lost 0 dupl. 10, kafka lost 1 dupl. 5" in text
    assert "2pc by sink: postgres lost 0 dupl. 0, kafka lost 0 dupl. 0" in text
    assert "polls that saw a later sink ahead of an earlier one: 2pc 0" in text


def test_report_of_one_sink_has_no_breakdown() -> None:
    from eosink.chaos.results import ScheduleResult

    one = ScheduleResult(strategy="2pc", seed=1, mode="naive", schedule={}, verdict={"lost": 0, "duplicated": 4})
    report = _report([one], "postgres")
    assert report["naive"]["sinks"] == {} and "by sink" not in format_table(report)
    assert "ahead of an earlier one" not in format_table(report)


@pytest.mark.parametrize("replication", ["sync", "async"])
@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent"])
def test_a_replicated_schedule_fails_over_after_cutting_the_standbys_link(strategy: str, replication: str) -> None:
    """On a replicated server the sink restart is a failover, one batch after the promoted standby's link is cut
    (in the same run, before its kill), so that under async replication the batch committed in between is lost.

    Pass: seeded; the same kinds as a single server's but the restart, plus link-cut and failover; the link cut
    right before the failover, in a run whose kill leaves two batches for them; one server's schedules unchanged.
    """
    a = make_schedule(11, strategy, W, replication=replication)
    assert a == make_schedule(11, strategy, W, replication=replication) and a.replication == replication
    kinds = [f.kind for run in a.runs for f in run]
    assert set(kinds) == {"point-kill", "random-kill", "task-failure", "commit-cut", "link-cut", "failover"}
    run = next(r for r in a.runs if any(f.kind == "failover" for f in r))
    kinds_of_run = [f.kind for f in run]
    cut, failover = kinds_of_run.index("link-cut"), kinds_of_run.index("failover")
    assert cut < failover and run[cut].after < run[failover].after, run
    if run[-1].kind == "point-kill":
        assert run[-1].offset >= 3, "the run's kill leaves the failover its batches"
    assert a.to_json()["replication"] == replication and "replication" not in make_schedule(11, strategy, W).to_json()
    assert make_schedule(11, strategy, W) == make_schedule(11, strategy, W, replication="")


def test_a_replicated_report_has_a_row_per_strategy_and_replication() -> None:
    """Pass: rows per (replication, strategy) with failovers, losses detected and rewinds; the table shows them."""
    from eosink.chaos.report import build_report
    from eosink.chaos.results import ScheduleResult

    results = []
    for replication in ("sync", "async"):
        for strategy in ("2pc", "txid-check"):
            r = ScheduleResult(strategy, 1, "eosink", {}, replication=replication, failovers=1)
            if replication == "async":
                r.losses_detected = r.rewinds = 1
            results.append(r)
    report = build_report(
        results,
        sink="postgres",
        seed=1,
        schedules=1,
        kills=3,
        workload=W,
        master="local[2]",
        strategies=("2pc", "txid-check"),
        atomic=lambda s: True,
        duration_s=1.0,
        jobs=1,
        resumed=0,
        topology="replicated",
    )
    assert report["topology"] == "replicated"
    rows = [
        (r["replication"], r["strategy"], r["failovers"], r["losses_detected"], r["rewinds"]) for r in report["results"]
    ]
    assert rows == [
        ("sync", "2pc", 1, 0, 0),
        ("sync", "txid-check", 1, 0, 0),
        ("async", "2pc", 1, 1, 1),
        ("async", "txid-check", 1, 1, 1),
    ]
    assert "txid-check (async replication): 1 failover(s), 1 loss(es)" in format_table(report)


def test_the_replicated_topology_is_offered_by_postgres_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """Pass: get_target refuses another sink's replicated topology with a ConfigurationError naming what it offers;
    the CLI refuses --replication without --topology replicated."""
    from eosink.chaos.cli import main
    from eosink.chaos.target import get_target
    from eosink.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="offers the topologies single"):
        get_target("kafka", topology="replicated")
    assert type(get_target("postgres", topology="replicated")).__name__ == "ReplicatedPostgresChaosTarget"
    assert main(["--replication", "async"]) == 2
    assert "--replication needs --topology replicated" in capsys.readouterr().err


@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent"])
def test_a_cluster_schedule_kills_and_pauses_nodes_and_holds_an_end_txn(strategy: str) -> None:
    """On a cluster the sink restart gives way to a node killed, a node paused and an EndTxn held.

    Pass: seeded; the kinds are the single server's but the restart, plus node-kill, node-pause and request-hold;
    each node fault names the role it hits; across seeds both roles are drawn; replay names the topology."""
    from eosink.chaos.results import ScheduleResult
    from eosink.chaos.schedule import KAFKA_CLUSTER, NODE_ROLES

    a = make_schedule(11, strategy, W, cluster=KAFKA_CLUSTER)
    assert a == make_schedule(11, strategy, W, cluster=KAFKA_CLUSTER)
    kinds = [f.kind for run in a.runs for f in run]
    kills = ["point-kill", "random-kill", "point-kill"]
    assert sorted(kinds) == sorted([*kills, "task-failure", "commit-cut", "node-kill", "node-pause", "request-hold"])
    node_faults = [f for run in a.runs for f in run if f.kind in ("node-kill", "node-pause")]
    assert all(f.role in NODE_ROLES for f in node_faults)
    assert all(run[-1].terminal for run in a.runs[:-1]) and not a.runs[-1]
    roles = {
        f.role for s in range(1, 21) for run in make_schedule(s, strategy, W, cluster=KAFKA_CLUSTER).runs for f in run
    }
    assert roles >= set(NODE_ROLES)
    assert "coordinator node killed" in " ".join(
        f.describe()
        for s in range(1, 21)
        for run in make_schedule(s, strategy, W, cluster=KAFKA_CLUSTER).runs
        for f in run
    )
    r = ScheduleResult(strategy, 11, "eosink", a.to_json())
    assert "--topology cluster" in r.replay_command("kafka", 3, "cluster")
    assert "--topology" not in r.replay_command("kafka", 3)


def test_the_runner_injects_a_clusters_faults_through_the_target(tmp_path: Path) -> None:
    """Pass: once the run has committed a batch, each cluster fault calls its target method and is recorded under
    the prefix ``_happened`` and EXPLAINED know (an error exit it explains lets the next run go on); a target on
    one server refuses them with a ConfigurationError naming the topology to use."""
    from eosink.chaos.results import RunRecord
    from eosink.chaos.runner import EXPLAINED, _happened, _RunnerFaults
    from eosink.chaos.schedule import Fault
    from eosink.chaos.target import ServerSide
    from eosink.errors import ConfigurationError

    calls: list[str] = []

    class Cluster:
        def kill_node(self, role: str) -> str:
            calls.append(f"kill {role}")
            return f"{role} node 2 SIGKILLed"

        def pause_node(self, role: str) -> str:
            calls.append(f"pause {role}")
            return f"{role} node 1 paused"

        def hold_end_txn(self) -> str:
            calls.append("hold")
            return "next EndTxn held"

    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits").mkdir(parents=True)
    faults = [Fault("node-kill", after=1, role="leader"), Fault("node-pause", after=1, role="coordinator")]
    faults.append(Fault("request-hold", after=1))
    rec = RunRecord(0, [f.describe() for f in faults], "")
    inject = _RunnerFaults(Cluster(), None, checkpoint, faults, None, tmp_path / "faults.log", rec)  # type: ignore[arg-type]
    assert inject() is False and calls == []  # nothing committed yet
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    inject()
    assert calls == ["kill leader", "pause coordinator", "hold"]
    assert all(_happened(f, rec.injected) for f in faults), rec.injected
    assert all(x.startswith(EXPLAINED) for x in rec.injected)
    with pytest.raises(ConfigurationError, match="topology cluster"):
        ServerSide(None, "x").kill_node("leader")


def test_the_cluster_topology_is_offered_by_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    """Pass: Kafka's cluster target is the cluster one; PostgreSQL has no cluster topology (the error names
    Kafka's); the CLI's cluster topology runs eosink's schedules and the baseline, not the non-deterministic mode."""
    from eosink.chaos.cli import main
    from eosink.chaos.target import get_target
    from eosink.errors import ConfigurationError

    assert type(get_target("kafka", topology="cluster")).__name__ == "KafkaClusterChaosTarget"
    with pytest.raises(ConfigurationError, match="--sink kafka --topology cluster"):
        get_target("postgres", topology="cluster")
    assert main(["--sink", "kafka", "--topology", "cluster", "--only", "nondeterministic"]) == 2
    assert "--topology cluster runs --only eosink and --only naive only" in capsys.readouterr().err


def test_stores_of_several_nodes_offer_their_own_node_faults(capsys: pytest.CaptureFixture[str]) -> None:
    """Pass: S3 and Delta run on a four-node MinIO (``cluster``), HDFS on an HA name service (``ha``); their
    schedules put a node kill (a storage node, the active NameNode) where the sink restart was, with no pause
    and no held EndTxn; the same seed draws Kafka's schedule as before (the faults are the target's data); the
    CLI runs eosink's schedules only on them."""
    from eosink.chaos.cli import main
    from eosink.chaos.schedule import KAFKA_CLUSTER
    from eosink.chaos.target import get_target

    expected = {
        ("s3", "cluster"): ("S3ClusterChaosTarget", "storage"),
        ("delta", "cluster"): ("DeltaClusterChaosTarget", "storage"),
        ("hdfs", "ha"): ("HdfsHaChaosTarget", "active"),
    }
    for (sink, topology), (name, role) in expected.items():
        target = get_target(sink, topology=topology)
        assert type(target).__name__ == name
        faults = target.cluster_faults
        assert faults is not None and faults.roles == (role,)
        s = make_schedule(3, "2pc", W, cluster=faults)
        kinds = sorted(f.kind for run in s.runs for f in run)
        assert kinds == sorted(["point-kill", "random-kill", "point-kill", "task-failure", "commit-cut", "node-kill"])
        assert f"{role} node killed" in " ".join(f.describe() for run in s.runs for f in run)
    assert get_target("kafka", topology="cluster").cluster_faults == KAFKA_CLUSTER
    assert get_target("s3").cluster_faults is None
    assert main(["--sink", "hdfs", "--topology", "ha", "--only", "naive"]) == 2
    assert "--topology ha runs --only eosink only" in capsys.readouterr().err


def test_a_following_proxy_cuts_at_the_current_node_and_counts_every_nodes_cuts() -> None:
    """Pass: a cut is armed at the proxy ``current`` names when it is armed (the active NameNode, the coordinator),
    not at the others; the runner's count of cut requests sums every node's; passthrough disarms all."""
    from types import SimpleNamespace

    from eosink.chaos.target import FollowingProxy

    class Node:
        def __init__(self, port: int) -> None:
            self.port, self.armed, self.stats = port, [], SimpleNamespace(requests_cut=[])

        def cut_after_request(self, match: bytes, **options: object) -> None:
            self.armed.append(match)

        def passthrough(self) -> None:
            self.armed.clear()

    nodes = [Node(7001), Node(7002)]
    current = [1]
    proxy = FollowingProxy(lambda: nodes, lambda: nodes[current[0]])
    proxy.cut_after_request(b"rename2")
    assert nodes[1].armed == [b"rename2"] and not nodes[0].armed
    current[0] = 0
    proxy.cut_after_request(b"rename2")
    assert nodes[0].armed == [b"rename2"]
    nodes[0].stats.requests_cut.append(b"a")
    nodes[1].stats.requests_cut.append(b"b")
    assert sorted(proxy.stats.requests_cut) == [b"a", b"b"] and proxy.port == 7001
    proxy.passthrough()
    assert not nodes[0].armed and not nodes[1].armed


def test_a_lost_batch_is_an_expected_outcome_only_after_the_fault_that_can_cause_it(tmp_path: Path) -> None:
    """The runner rewinds a run that stopped with a lost batch only where a fault of the schedule can lose one:
    CommittedWorkLostError after a failover to an asynchronous standby; PreparedWorkLostError after a node kill,
    on a cluster whose nodes can lose prepared work (MinIO). Pass: each is expected there and nowhere else."""
    from eosink.chaos.results import RunRecord, ScheduleResult
    from eosink.chaos.runner import ScheduleRunner
    from eosink.chaos.schedule import ClusterFaults

    class Target:
        def __init__(self, faults: ClusterFaults | None) -> None:
            self.cluster_faults = faults

    def expects(faults: ClusterFaults | None, replication: str, injected: list[str], kind: str) -> bool:
        schedule = dataclasses.replace(make_schedule(1, "2pc", W), replication=replication)
        result = ScheduleResult("2pc", 1, "eo", {})
        result.runs.append(RunRecord(0, [], "", injected=injected))
        runner = ScheduleRunner(Target(faults), tmp_path)  # type: ignore[arg-type]
        return runner._expects_loss(schedule, result, kind)

    minio = ClusterFaults(("storage",), pause=False, loses_prepared=True)
    kafka = ClusterFaults(("leader",))
    killed = ["node killed: storage node 2 SIGKILLed"]
    assert expects(minio, "", killed, "PreparedWorkLostError")
    assert not expects(minio, "", ["sink restarted"], "PreparedWorkLostError")
    assert not expects(kafka, "", killed, "PreparedWorkLostError")
    assert not expects(None, "", killed, "PreparedWorkLostError")
    assert not expects(minio, "", killed, "CommittedWorkLostError")
    assert expects(None, "async", ["failover: primary killed"], "CommittedWorkLostError")
    assert not expects(None, "sync", ["failover: primary killed"], "CommittedWorkLostError")
    assert not expects(minio, "", killed, "CommitAbortedError")
