"""The chaos harness's fan-out target (eosink.chaos.fanout) over stand-in member targets: no server, no Spark.

Each stand-in records what the composite asks of it and serves snapshots and rows the test scripts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eosink import faults
from eosink.chaos.fanout import FanOutTarget, member_names
from eosink.chaos.job import plain_writer
from eosink.chaos.oracle import Verdict, combined
from eosink.chaos.reader import Reader
from eosink.chaos.target import KEY_ALIAS, Names, Snapshot, get_target, key_of, oracle_rows
from eosink.errors import InjectedFault

NAMES = Names("chaos_t", "chaos_t_ctl", "chaos-app")


class StandIn:
    """A member target whose snapshots and rows are set by the test."""

    def __init__(self, name: str, env: dict[str, str], reads: list[str]) -> None:
        self.name = name
        self.env = env
        self.reads = reads  # every member's snapshot reads, in order
        self.snapshots: list[Snapshot | None] = []
        self.rows: list[Any] = []
        self.calls: list[str] = []

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        self.calls.append(f"job_env {proxy_port}")
        return dict(self.env)

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        self.calls.append(f"snapshotter {names.app_id}")

        def read() -> Snapshot | None:
            self.reads.append(self.name)
            return self.snapshots.pop(0)

        return read

    def read_rows(self, names: Names) -> list[Any]:
        self.calls.append(f"read_rows {names.app_id}")
        return self.rows

    def restart(self, *, crash: bool) -> None:
        self.calls.append(f"restart crash={crash}")

    def atomic(self, strategy: str) -> bool:
        return strategy != "idempotent"

    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        def write(df: Any, batch_id: int) -> None:
            self.calls.append(f"plain write {table} {batch_id}")

        return write


def fanout() -> tuple[FanOutTarget, StandIn, StandIn]:
    reads: list[str] = []
    pg = StandIn("postgres", {"EOSINK_CHAOS_PG_URL": "pg", "EOSINK_CHAOS_JARS": "jdbc.jar"}, reads)
    kafka = StandIn("kafka", {"EOSINK_CHAOS_KAFKA_BOOTSTRAP": "k", "EOSINK_CHAOS_JARS": "kafka.jar,common.jar"}, reads)
    return FanOutTarget([pg, kafka]), pg, kafka  # type: ignore[list-item]


def test_the_proxy_fronts_the_first_sink_and_the_job_gets_every_sinks_settings() -> None:
    """Pass: only the first sink's job_env gets the proxy's port; the jars of both sinks' baselines travel
    in the one variable; each sink reads under its member app_id; a crash restarts both."""
    target, pg, kafka = fanout()
    env = target.job_env(4242)
    assert (pg.calls, kafka.calls) == (["job_env 4242"], ["job_env None"])
    assert env["EOSINK_CHAOS_JARS"] == "jdbc.jar,kafka.jar,common.jar"
    assert env["EOSINK_CHAOS_PG_URL"] == "pg" and env["EOSINK_CHAOS_KAFKA_BOOTSTRAP"] == "k"
    target.rows_by_sink(NAMES)
    assert pg.calls[-1] == "read_rows chaos-app.postgres" and kafka.calls[-1] == "read_rows chaos-app.kafka"
    target.restart(crash=True)
    assert pg.calls[-1] == kafka.calls[-1] == "restart crash=True"
    assert target.name == "postgres+kafka"
    assert target.atomic("2pc") and not target.atomic("idempotent")
    assert member_names(NAMES, "kafka") == Names("chaos_t", "chaos_t_ctl", "chaos-app.kafka")


def test_a_batch_in_the_later_sink_before_the_earlier_sink_committed_it_is_an_order_break() -> None:
    """Three polls. Pass: the later sink (kafka) is read first; batch 1 in kafka while postgres holds only
    batch 0 is an order break naming both; kafka behind postgres is none; a down server makes the poll None."""
    target, pg, kafka = fanout()
    poll = target.snapshotter(NAMES)
    pg.snapshots += [Snapshot({0: 4}, frozenset({0})), Snapshot({0: 4, 1: 4}, frozenset({0, 1})), None]
    kafka.snapshots += [
        Snapshot({0: 4, 1: 2}, frozenset({0})),
        Snapshot({0: 4}, frozenset({0})),
        Snapshot({}, frozenset()),
    ]
    first = poll()
    assert first is not None and first.order_breaks == ("batch 1 visible in kafka before postgres committed it",)
    assert pg.reads[:2] == ["kafka", "postgres"]
    second = poll()
    assert second is not None and second.order_breaks == ()
    assert poll() is None


def test_the_reader_counts_order_breaks_whatever_the_atomicity() -> None:
    """Pass: a snapshot with an order break counts once in order_breaks and names it in the examples, also
    where the sinks do not declare atomic batches (Kafka)."""
    snaps = [Snapshot({0: 2}, frozenset({0}), order_breaks=("batch 0 visible in kafka before postgres committed it",))]
    reader = Reader(lambda: snaps.pop(0) if snaps else None, lambda b: 2, atomic=False)
    with reader:
        from eosink._waiting import wait_until

        assert wait_until(lambda: reader.order_breaks == 1, 5)
    assert reader.order_breaks == 1 and "kafka before postgres" in reader.examples[0]


def test_verdicts_of_several_sinks_add_up_and_keep_each_sink() -> None:
    """Pass: lost and duplicated add up, details name their sink, each sink's verdict is kept; one sink's
    verdict stays as it is."""
    a, b = Verdict(expected=10, found=9, lost=1), Verdict(expected=10, found=11, duplicated=1)
    a.note("key k1 lost")
    both = combined({"postgres": a, "kafka": b})
    assert (both.lost, both.duplicated, both.expected, both.ok) == (1, 1, 20, False)
    assert both.details == ["postgres: key k1 lost"]
    assert set(both.sinks) == {"postgres", "kafka"} and both.sinks["kafka"]["duplicated"] == 1
    assert combined({"postgres": a}) is a


def test_a_record_keeps_its_key_under_either_name() -> None:
    """Pass: the key reads from ``key`` or from the alias a Kafka frame gives it; oracle rows use it."""
    assert key_of({"key": "k1"}) == key_of({KEY_ALIAS: "k1"}) == "k1"
    row = {"batch_id": 3, KEY_ALIAS: "k2", "running_sum": 5, "concat": "ab", "n_tokens": 2}
    assert oracle_rows([row]) == [(3, "k2", 5, "ab", 2)]


def test_get_target_builds_a_fan_out_from_a_plus_joined_name() -> None:
    """Pass: ``postgres+kafka`` gives a FanOutTarget of the two sinks' own targets, in that order."""
    target = get_target("postgres+kafka")
    assert isinstance(target, FanOutTarget)
    assert [m.name for m in target.members] == ["postgres", "kafka"]


def test_the_baselines_crash_point_comes_after_every_sinks_plain_write() -> None:
    """The plain writer's F8 (written, not yet in Spark's commit log) fires once the last sink has the batch, so
    a kill there leaves a batch to be replayed into every sink."""
    target, pg, kafka = fanout()
    write = plain_writer(target, "chaos_t")
    faults.configure("F8@1:raise")
    try:
        write(None, 0)
        with pytest.raises(InjectedFault):
            write(None, 1)
    finally:
        faults.reset()
    assert [c for c in pg.calls if c.startswith("plain")] == ["plain write chaos_t 0", "plain write chaos_t 1"]
    assert [c for c in kafka.calls if c.startswith("plain")] == ["plain write chaos_t 0", "plain write chaos_t 1"]


@pytest.mark.parametrize("sink", ["postgres", "kafka", "s3", "hdfs", "delta"])
def test_no_sinks_plain_writer_takes_a_fault_point_itself(sink: str) -> None:
    """Pass: the job alone puts F8 after the plain write; a member's own F8 would crash a fan-out's baseline
    before its later sinks were written (no duplicate there to show)."""
    import importlib
    import inspect

    module = importlib.import_module(f"eosink.connectors.{sink}._chaos")
    targets = [c for n, c in vars(module).items() if n.endswith("ChaosTarget") and inspect.isclass(c)]
    assert targets
    for cls in targets:
        assert "faults" not in inspect.getsource(cls.job_naive_writer)
