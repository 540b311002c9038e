"""The demo's Spark-free parts: its seeded schedule, its input, its verdict, its views, its usage errors."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("strategy", sorted(KILL_POINTS))
@pytest.mark.parametrize("batches", [4, 7, 10])
def test_a_fan_out_scenario_crashes_between_the_sinks(strategy: str, batches: int) -> None:
    """Pass: a fan-out's schedule always has a kill at F14 (where the next sink has not committed yet), also
    without plain cuts, which keep a kill where Spark replays the batch once there are two kills; a single
    sink's never has F14."""
    for seed in range(20):
        for plain_cuts in (True, False):
            s = make_scenario(strategy, seed, batches, plain_cuts=plain_cuts, fanout=True)
            points = [r.kill_point for r in s.runs]
            assert "F14" in points, (seed, plain_cuts, s.runs)
            replayed = (*REPLAYED[strategy], *(("F14",) if strategy != "2pc" else ()))
            if not plain_cuts and s.planned_crashes >= 2:
                assert any(p in replayed for p in points), (seed, s.runs)
        assert not any(r.kill_point == "F14" for r in make_scenario(strategy, seed, batches).runs)
    assert "between the first sink's commit and the next one's" in describe_point("F14", "txid-check")
    assert "after Spark's commit log" in describe_point("F14", "2pc")


class _StandIn:
    """A demo target that records what the fan-out asks of it."""

    plain_cuts = True

    def __init__(self, name: str, jars: str, held: dict[str, Counter[tuple[int, str, int]]]) -> None:
        self.name, self.jars, self.held = name, jars, held
        self.title = f"a private {name}"
        self.plain_title = f"{name}'s plain writer"
        self.started = self.closed = False
        self.env_ports: dict[str, int] = {}

    def where(self, side: str) -> str:
        return f"{self.name}:{side}"

    def start(self) -> None:
        self.started = True

    def close(self) -> None:
        self.closed = True

    def address(self, side: str) -> tuple[str, int]:
        return ("127.0.0.1", 9)

    def proxy_port(self, side: str) -> int:
        return 0

    def job_env(self, proxy_ports: dict[str, int]) -> dict[str, str]:
        self.env_ports = dict(proxy_ports)
        return {f"{self.name.upper()}_URL": "x", "EOSINK_DEMO_JARS": self.jars, "EOSINK_DEMO_SPARK_CONF": '{"a": 1}'}

    def counts(self) -> dict[str, tuple[int, int]]:
        return {side: (sum(self.held[side].values()), 1) for side in ("eosink", "plain")}

    def payments(self, side: str) -> Counter[tuple[int, str, int]]:
        return self.held[side]

    def in_doubt(self) -> int:
        return 1

    def job_sink(self, app_id: str) -> str:
        return f"{self.name}@{app_id}"

    def job_plain_writer(self) -> Any:
        return lambda df, batch_id: df.append((self.name, batch_id))

    def scrub(self, text: str) -> str:
        return text.replace(f"secret-{self.name}", "***")


def test_the_fan_out_demo_target_drives_every_sink_and_judges_each() -> None:
    """Pass: both sinks start and close; the first is reached through the demo's proxies and the second through
    passthrough proxies of its own; their jars join and settings merge; each sink's payments are judged apart;
    the job's sinks are named and keep the fan-out's member app_ids; the plain writer writes each sink in turn."""
    from eosink.demo.fanout import FanOutDemoTarget
    from eosink.demo.run import _payments

    one = Counter({(1, "a", 5): 1})
    pg = _StandIn("postgres", "/j/pg.jar", {"eosink": one, "plain": one + one})
    kafka = _StandIn("kafka", "/j/k1.jar,/j/pg.jar", {"eosink": one, "plain": Counter()})
    target = FanOutDemoTarget([("postgres", pg), ("kafka", kafka)])
    target.start()
    try:
        env = target.job_env({"eosink": 1111, "plain": 2222})
        assert pg.env_ports == {"eosink": 1111, "plain": 2222}
        assert set(kafka.env_ports) == {"eosink", "plain"} and 1111 not in kafka.env_ports.values()
        assert env["EOSINK_DEMO_JARS"] == "/j/pg.jar,/j/k1.jar" and json.loads(env["EOSINK_DEMO_SPARK_CONF"]) == {
            "a": 1
        }
        assert {"POSTGRES_URL", "KAFKA_URL"} <= set(env)
    finally:
        target.close()
    assert pg.started and kafka.started and pg.closed and kafka.closed
    assert target.counts() == {"eosink": (1, 2), "plain": (0, 2)}
    assert _payments(target, "plain") == {"postgres": one + one, "kafka": Counter()}
    assert _payments(pg, "eosink") == {"": one}  # type: ignore[arg-type]
    assert target.in_doubt() == 2
    assert target.job_sink("demo") == {"postgres": "postgres@demo.postgres", "kafka": "kafka@demo.kafka"}
    written: list[tuple[str, int]] = []

    class _Df(list):  # type: ignore[type-arg]
        def persist(self) -> None:
            written.append(("persist", 0))

        def unpersist(self) -> None:
            written.append(("unpersist", 0))

    df = _Df()
    target.job_plain_writer()(df, 3)
    assert list(df) == [("postgres", 3), ("kafka", 3)] and written == [("persist", 0), ("unpersist", 0)]
    assert target.scrub("secret-postgres secret-kafka") == "*** ***"
    assert target.title == "a private postgres, then a private kafka"


def test_a_fan_out_demo_counts_each_sinks_replays_on_its_own_table() -> None:
    """A fan-out driver's saved counters hold each sink's own under ``sinks`` and their sum at the top.

    Pass: a sink's table gets that sink's count over every run, not the sum of both sinks; with no sink named
    (one sink's demo), the top-level count.
    """
    from eosink.demo.run import _Tally

    tally = _Tally()
    tally.stats = [
        {"replays_skipped": 3, "sinks": {"postgres": {"replays_skipped": 1}, "kafka": {"replays_skipped": 2}}},
        {"replays_skipped": 1, "sinks": {"postgres": {"replays_skipped": 0}, "kafka": {"replays_skipped": 1}}},
    ]
    assert (tally.stat("replays_skipped", "postgres"), tally.stat("replays_skipped", "kafka")) == (1, 3)
    assert tally.stat("replays_skipped") == 4
    assert _Tally(stats=[{"replays_skipped": 2}]).stat("replays_skipped") == 2
