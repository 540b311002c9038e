"""The demo's seeded schedule: which run of the pipeline crashes where, and which COMMIT replies are lost.

A scenario is a list of runs of the pipeline; after each run the demo restarts it from its
checkpoint until the input is exhausted. Each run but the last ends in a SIGKILL of the driver's
whole session: at a named fault point of eosink's protocol (the plain write of that batch is
already done), or at a random moment. Some runs also lose one COMMIT reply on eosink's
connection (an ambiguous commit eosink must resolve) and one on the plain writer's (its task
fails and Spark retries it). A plain writer whose client retries a cut reply without writing
twice (Kafka's idempotent producer) gets no cut; one of its crashes then lands before Spark's
commit log instead, where a replay writes the batch again. Everything comes from
``random.Random(seed)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["KILL_POINTS", "REPLAYED", "Run", "Scenario", "describe_point", "make_scenario"]

#: Where a crash can land in each strategy's protocol (F5, after Spark's commit log, is 2PC only).
KILL_POINTS: dict[str, tuple[str, ...]] = {
    "2pc": ("F3", "F4", "F5", "F6", "F8"),
    "txid-check": ("F3", "F4", "F6", "F8"),
    "idempotent": ("F3", "F4", "F6", "F8"),
}

_POINTS = {
    "F3": "after the batch was written, before its manifest",
    "F4": "after the manifest, before the commit",
    "F5": "after Spark's commit log, before eosink's commit",
    "F6": "in the middle of the sink's commit",
    "F8": "after eosink's commit, before Spark's commit log",
    "F14": "between the first sink's commit and the next one's",
}


#: The points before Spark's commit log: a crash there makes Spark replay the batch.
REPLAYED: dict[str, tuple[str, ...]] = {
    "2pc": ("F3", "F4"),
    "txid-check": KILL_POINTS["txid-check"],
    "idempotent": KILL_POINTS["idempotent"],
}


def describe_point(point: str, strategy: str) -> str:
    """Where ``point`` is in ``strategy``'s protocol, in words (2PC commits after Spark's commit log)."""
    if strategy == "2pc" and point == "F8":
        return "after eosink's commit, which follows Spark's commit log"
    if strategy == "2pc" and point == "F14":
        return "after Spark's commit log, between the first sink's commit and the next one's"
    return _POINTS.get(point, point)


@dataclass(frozen=True)
class Run:
    """One run of the pipeline and the faults armed during it."""

    kill_point: str | None = None  # a named fault point, ``kill_offset`` batches into the run
    kill_offset: int = 2
    random_kill_after: int | None = None  # or a kill once the run committed this many batches ...
    random_kill_delay_s: float = 0.0  # ... and this much later
    cut_eosink_after: int | None = None  # lose the reply to eosink's next COMMIT after this many batches
    cut_plain_after: int | None = None  # the same on the plain writer's connection

    @property
    def crashes(self) -> bool:
        return self.kill_point is not None or self.random_kill_after is not None

    def describe(self, strategy: str) -> str:
        parts = []
        if self.cut_plain_after is not None:
            parts.append("a lost COMMIT reply (plain)")
        if self.cut_eosink_after is not None:
            parts.append("a lost COMMIT reply (eosink)")
        if self.kill_point is not None:
            parts.append(f"SIGKILL at {self.kill_point} ({describe_point(self.kill_point, strategy)})")
        elif self.random_kill_after is not None:
            parts.append(f"SIGKILL at a random moment ({self.random_kill_delay_s:.2f} s after a batch)")
        return ", ".join(parts) or "to the end of the input"


@dataclass(frozen=True)
class Scenario:
    """The runs for one ``--strategy`` / ``--seed`` / ``--batches``."""

    strategy: str
    seed: int
    batches: int
    runs: tuple[Run, ...]

    @property
    def planned_crashes(self) -> int:
        return sum(r.crashes for r in self.runs)

    @property
    def planned_cuts(self) -> int:
        return sum((r.cut_eosink_after is not None) + (r.cut_plain_after is not None) for r in self.runs)


def make_scenario(strategy: str, seed: int, batches: int, *, plain_cuts: bool = True, fanout: bool = False) -> Scenario:
    """Up to three crashed runs (one per three batches), then a run to the end.

    Two distinct fault points and one random kill, in a seeded order; eosink loses a COMMIT reply
    in the first two crashed runs and the plain writer in one of them. Without ``plain_cuts``
    the plain writer loses none, and the first fault point is one Spark replays. A ``fanout``
    (several sinks) always crashes once between two sinks' commits (F14).
    """
    if strategy not in KILL_POINTS:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {sorted(KILL_POINTS)}")
    rng = random.Random(f"demo-{seed}-{strategy}")
    crashes = max(1, min(3, (batches - 1) // 3))
    first, second = rng.sample(KILL_POINTS[strategy], 2)
    replayed = REPLAYED[strategy] + (("F14",) if fanout and strategy != "2pc" else ())
    if not plain_cuts and first not in replayed:
        first = rng.choice([p for p in replayed if p != second])
    if fanout:  # F14 takes the kill that every schedule keeps; the point Spark replays, if needed, the next one
        first, second = "F14", (first if not plain_cuts and "F14" not in replayed else second)
    kills: list[Run] = [
        Run(kill_point=first, kill_offset=2),
        Run(random_kill_after=2, random_kill_delay_s=round(rng.uniform(0.0, 1.0), 2)),
        Run(kill_point=second, kill_offset=2),
    ]
    if fanout:  # both named points before the random kill: two crashes keep both
        kills = [kills[0], kills[2], kills[1]]
    kills = kills[:crashes]
    rng.shuffle(kills)
    plain_cut = rng.randrange(min(2, crashes))
    runs = [
        Run(
            kill_point=k.kill_point,
            kill_offset=k.kill_offset,
            random_kill_after=k.random_kill_after,
            random_kill_delay_s=k.random_kill_delay_s,
            cut_eosink_after=1 if i < 2 else None,
            cut_plain_after=1 if i == plain_cut and plain_cuts else None,
        )
        for i, k in enumerate(kills)
    ]
    return Scenario(strategy, seed, batches, (*runs, Run()))
