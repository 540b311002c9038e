"""The demo's Spark-free parts: its seeded schedule, its input, its verdict, its views, its usage errors."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console

from eosink.demo import demo_main
from eosink.demo.run import _outcome, write_payments
from eosink.demo.scenario import KILL_POINTS, REPLAYED, describe_point, make_scenario
from eosink.demo.view import Counts, Snapshot, View, final_table


@pytest.mark.parametrize("strategy", sorted(KILL_POINTS))
def test_scenario_is_seeded_and_crashes_every_run_but_the_last(strategy: str) -> None:
    a = make_scenario(strategy, 7, 10)
    assert a == make_scenario(strategy, 7, 10)
    assert any(make_scenario(strategy, s, 10) != a for s in range(8, 20))
    assert a.planned_crashes == 3 and len(a.runs) == 4
    assert all(r.crashes for r in a.runs[:-1]) and not a.runs[-1].crashes
    points = [r.kill_point for r in a.runs if r.kill_point]
    assert len(points) == 2 and len(set(points)) == 2 and set(points) <= set(KILL_POINTS[strategy])
    assert sum(r.random_kill_after is not None for r in a.runs) == 1
    assert sum(r.cut_eosink_after is not None for r in a.runs) == 2
    assert sum(r.cut_plain_after is not None for r in a.runs) == 1
    assert a.runs[-1].describe(strategy) == "to the end of the input"


@pytest.mark.parametrize("strategy", sorted(KILL_POINTS))
@pytest.mark.parametrize("batches", [4, 7, 10])
def test_without_plain_cuts_a_crash_lands_where_spark_replays_the_batch(strategy: str, batches: int) -> None:
    # A plain writer that retries a cut reply idempotently (Kafka) must still meet a replay.
    for seed in range(30):
        s = make_scenario(strategy, seed, batches, plain_cuts=False)
        assert not any(r.cut_plain_after is not None for r in s.runs)
        assert any(r.kill_point in REPLAYED[strategy] for r in s.runs), (seed, s.runs)
        assert s == make_scenario(strategy, seed, batches, plain_cuts=False)


def test_scenario_scales_with_batches_and_f5_is_2pc_only() -> None:
    assert make_scenario("2pc", 1, 4).planned_crashes == 1
    assert make_scenario("2pc", 1, 7).planned_crashes == 2
    assert make_scenario("2pc", 1, 40).planned_crashes == 3
    assert "F5" not in KILL_POINTS["txid-check"] and "F5" in KILL_POINTS["2pc"]
    assert "follows Spark's commit log" in describe_point("F8", "2pc")
    assert "before Spark's commit log" in describe_point("F8", "txid-check")
    with pytest.raises(ValueError, match="unknown strategy"):
        make_scenario("naive", 1, 10)


def test_payments_are_seeded_one_file_per_batch_in_mtime_order(tmp_path: Path) -> None:
    sent = write_payments(tmp_path / "a", 5, 30, 3)
    assert sent == write_payments(tmp_path / "b", 5, 30, 3)
    assert sent != write_payments(tmp_path / "c", 5, 30, 4)
    files = sorted((tmp_path / "a").iterdir(), key=lambda p: p.stat().st_mtime)
    assert [p.name for p in files] == [f"payments-{b:04d}.json" for b in range(5)]
    first = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert [(r["id"], r["account"], r["amount"]) for r in first] == sent[:30]
    assert len({p[0] for p in sent}) == 150


def test_outcome_counts_duplicates_losses_and_balances() -> None:
    sent = [(1, "a", 10), (2, "a", 5), (3, "b", 7)]
    exact = _outcome("x", sent, Counter(sent), lost_replies=0, how_resolved="-", replays_skipped="0")
    assert exact.exact and (exact.duplicates, exact.lost, exact.accounts_right) == (0, 0, 2)
    found = Counter({(1, "a", 10): 2, (3, "b", 7): 1})
    off = _outcome("y", sent, found, lost_replies=1, how_resolved="-", replays_skipped="-")
    assert not off.exact and (off.found, off.duplicates, off.lost) == (3, 1, 1)
    assert off.accounts_right == 1  # a: 20 instead of 15; b right


def test_views_print_events_and_the_final_table() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    with View(console, "title", 4) as view:
        view.event("run 1: started")
        view.update(Snapshot(run=1, batches_done=2, expected_rows=20, plain=Counts(25, 5), eosink=Counts(20, 0)))
        view.update(Snapshot(run=1, batches_done=2, expected_rows=20, plain=Counts(25, 5), eosink=Counts(20, 0)))
    text = out.getvalue()
    assert "run 1: started" in text and text.count("Spark committed 2/4 batches") == 1
    assert "plain 25 rows (5 duplicated)" in text
    sent = [(1, "a", 10)]
    plain = _outcome(
        "plain", sent, Counter({sent[0]: 2}), lost_replies=1, how_resolved="wrote again", replays_skipped="-"
    )
    eos = _outcome("eosink", sent, Counter(sent), lost_replies=2, how_resolved="asked", replays_skipped="1")
    console.print(final_table(plain, eos, batches=4, crashes=3))
    table = out.getvalue()
    assert "duplicated" in table and "account balances right" in table and "0/1" in table and "1/1" in table


def test_demo_usage_errors_and_missing_java(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        demo_main(["--batches", "3"])
    assert info.value.code == 2 and "--batches must be at least 4" in capsys.readouterr().err
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert demo_main([]) == 2
    err = capsys.readouterr().err
    assert "Java 17" in err and "apt-get install" in err and "make demo" in err
