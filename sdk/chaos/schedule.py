"""Seeded schedules of faults: which faults hit a strategy's pipeline, in which run, and when.

A schedule is a list of *runs* of the job; the job is restarted from its checkpoint after
each run until its input is exhausted. Each run carries the faults armed during it, at most
one of which ends it (a kill). Kinds:

* ``point-kill``: SIGKILL of the driver's whole process group at a named fault point
  (``EOSINK_FAULTS``), at the batch ``offset`` batches after the first one the run processes;
* ``random-kill``: SIGKILL of the driver's session once the run has committed ``after``
  batches (Spark's commit log), ``delay_s`` later;
* ``commit-cut``: the fault proxy forwards the next ``COMMIT`` and drops its reply (an
  ambiguous commit), armed once the run has committed ``after`` batches;
* ``sink-restart``: the sink's server is restarted (``crash``: SIGKILLed) while the job runs,
  ``delay_s`` after the run has committed ``after`` batches;
* ``task-failure``: an executor task raises at ``F2`` (mid-write); Spark retries the task;
* on a replicated server (``topology="replicated"``) a ``failover`` takes the sink restart's
  place: the primary is SIGKILLed and a standby promoted (the synchronous one, or in ``async``
  replication the asynchronous one) once the run has committed ``after`` batches, the old
  primary rewound into a standby; and a ``link-cut`` cuts that standby's replication link one
  batch before, so that an asynchronous failover drops the batches committed in between;
* on a cluster of nodes (``topology="cluster"``: Kafka's three nodes, MinIO's four; ``topology="ha"``: HDFS's
  two NameNodes) the sink restart gives way to the faults the target offers (:class:`ClusterFaults`), each
  once the run has committed ``after`` batches: ``node-kill`` kills the node of a ``role`` (Kafka's
  ``leader``: the leader of a partition of the schedule's topic, or its ``coordinator``: the transaction
  coordinator; HDFS's ``active`` NameNode, whose standby takes over; a MinIO ``storage`` node) and brings it
  back when the run ends; ``node-pause`` SIGSTOPs one past its session timeout (a zombie) and resumes it;
  ``request-hold`` holds the next ``EndTxn`` at the coordinator past the client's timeout and then delivers
  it (KAFKA-17754's shape).

Everything is drawn from ``random.Random(f"{seed}-{strategy}")``: the same seed and strategy
give the same schedule, so a failing schedule is replayed alone with ``--seed``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any, Literal

from eosink.chaos.oracle import Workload

__all__ = [
    "KAFKA_CLUSTER",
    "KILL_POINTS",
    "NODE_ROLES",
    "TOPOLOGIES",
    "ClusterFaults",
    "Fault",
    "Schedule",
    "make_schedule",
    "naive_schedule",
    "nondeterministic_schedule",
]

FaultKind = Literal[
    "point-kill",
    "random-kill",
    "commit-cut",
    "sink-restart",
    "task-failure",
    "failover",
    "link-cut",
    "node-kill",
    "node-pause",
    "request-hold",
]
TOPOLOGIES = ("single", "replicated", "cluster", "ha")
"""A sink on one server, on a primary with standbys that fails over (PostgreSQL), on a cluster of nodes (Kafka's
brokers that lead partitions and coordinate transactions, MinIO's erasure-coded nodes), or on a name service of
two NameNodes that fails over (HDFS)."""
NODE_ROLES = ("leader", "coordinator")
"""The nodes a Kafka cluster's faults pick, by what they do for the schedule's writes."""
TERMINAL = ("point-kill", "random-kill")

#: The named fault points each strategy passes through with a transactional sink (F5 is 2PC only).
KILL_POINTS: dict[str, tuple[str, ...]] = {
    "2pc": ("F1", "F3", "F4", "F5", "F6", "F8"),
    "txid-check": ("F1", "F3", "F4", "F6", "F8"),
    "idempotent": ("F1", "F3", "F4", "F6", "F8"),
}


@dataclass(frozen=True)
class ClusterFaults:
    """What a target of several nodes offers a schedule in place of the sink restart: the roles its node faults
    pick from, and which of a node kill, a node pause and a held ``EndTxn`` it takes."""

    roles: tuple[str, ...]
    kill: bool = True
    pause: bool = True
    hold: bool = False
    loses_prepared: bool = False
    """A node killed as it applies a request can make the store lose prepared work for good (MinIO's
    ``CompleteMultipartUpload``): a run that then stops with PreparedWorkLostError is rewound, as an operator
    would, and counted among the losses detected."""


KAFKA_CLUSTER = ClusterFaults(NODE_ROLES, hold=True)
"""Kafka's three nodes: the leader or the coordinator killed and paused, and an ``EndTxn`` held."""


@dataclass(frozen=True)
class Fault:
    """One fault of a run (see the module docstring for the kinds)."""

    kind: FaultKind
    point: str | None = None
    offset: int = 0
    after: int = 0
    delay_s: float = 0.0
    crash: bool = False
    role: str = ""
    """A cluster's fault: the node it hits (one of :data:`NODE_ROLES`)."""

    @property
    def terminal(self) -> bool:
        return self.kind in TERMINAL

    def describe(self) -> str:
        if self.kind == "point-kill":
            return f"kill at {self.point} (+{self.offset} batches)"
        if self.kind == "task-failure":
            return f"task failure at {self.point} (+{self.offset} batches)"
        if self.kind == "random-kill":
            return f"kill {self.delay_s:.2f} s after {self.after} committed batches"
        if self.kind == "commit-cut":
            return f"COMMIT reply cut after {self.after} committed batches"
        if self.kind == "failover":
            return f"failover {self.delay_s:.2f} s after {self.after} committed batches"
        if self.kind == "link-cut":
            return f"replication link cut after {self.after} committed batches"
        if self.kind == "node-kill":
            return f"{self.role} node killed {self.delay_s:.2f} s after {self.after} committed batches"
        if self.kind == "node-pause":
            return f"{self.role} node paused {self.delay_s:.2f} s after {self.after} committed batches"
        if self.kind == "request-hold":
            return f"EndTxn held after {self.after} committed batches"
        what = "crash" if self.crash else "restart"
        return f"sink {what} {self.delay_s:.2f} s after {self.after} committed batches"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "describe": self.describe()}


@dataclass(frozen=True)
class Schedule:
    """The runs of one schedule of one strategy; the last run is the one that finishes the input."""

    seed: int
    strategy: str
    workload: Workload
    runs: tuple[tuple[Fault, ...], ...]
    nondeterministic: bool = False
    naive: bool = False
    replication: str = ""
    """On a replicated server: ``sync`` (the primary waits for a synchronous standby) or ``async``; else empty."""

    @property
    def planned(self) -> int:
        return sum(len(r) for r in self.runs)

    @property
    def mode(self) -> str:
        """Which part of the harness the schedule belongs to: ``eosink``, ``naive`` or ``nondeterministic``."""
        return "naive" if self.naive else "nondeterministic" if self.nondeterministic else "eosink"

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "strategy": self.strategy,
            "nondeterministic": self.nondeterministic,
            "naive": self.naive,
            "workload": self.workload.to_json(),
            "runs": [[f.describe() for f in run] for run in self.runs],
            **({"replication": self.replication} if self.replication else {}),
        }


def _rng(seed: int, strategy: str, tag: str = "") -> random.Random:
    return random.Random(f"{seed}-{strategy}{tag}")


def make_schedule(
    seed: int,
    strategy: str,
    workload: Workload,
    *,
    kills: int = 3,
    with_sink_faults: bool = True,
    replication: str = "",
    cluster: ClusterFaults | None = None,
) -> Schedule:
    """``kills + 3`` faults in ``kills + 1`` runs, in a seeded order: a point kill, a random kill and
    (``kills=3``) a second point kill; a task failure, a lost COMMIT reply and a sink restart (the
    last two omitted with ``with_sink_faults=False``). ``kills`` is 2 or 3. With ``replication``
    (``sync`` or ``async``: a replicated server) the sink restart is a link cut followed, one batch
    later in the same run, by a failover. With ``cluster`` (a cluster of nodes) it is the faults it names: a node
    killed, a node paused, an ``EndTxn`` held, each node of a role drawn from its roles."""
    if kills not in (2, 3):
        raise ValueError(f"kills must be 2 or 3, not {kills}")
    rng = _rng(seed, strategy + (f"-{replication}" if replication else ""))
    points = KILL_POINTS[strategy]
    first, second = rng.sample(points, 2)
    pool = [
        Fault("point-kill", point=first, offset=rng.randint(1, 2)),
        Fault("random-kill", after=rng.randint(1, 2), delay_s=round(rng.uniform(0.0, 1.5), 3)),
        Fault("point-kill", point=second, offset=rng.randint(1, 2)),
    ]
    kills_: list[Fault] = pool[:kills]
    rng.shuffle(kills_)
    # offset >= 1: a run's first batch may be the replay of a committed batch, skipped without a write
    extras: list[Fault] = [Fault("task-failure", point="F2", offset=rng.randint(1, 2))]
    if with_sink_faults:
        extras.append(Fault("commit-cut", after=1))
        if replication:
            extras.append(Fault("failover", after=2, delay_s=round(rng.uniform(0.0, 1.0), 3)))
        elif cluster:
            kill_delay, pause_delay = round(rng.uniform(0.0, 1.0), 3), round(rng.uniform(0.0, 1.0), 3)
            kill_role, pause_role = rng.choice(cluster.roles), rng.choice(cluster.roles)
            if cluster.kill:
                extras.append(Fault("node-kill", after=1, delay_s=kill_delay, role=kill_role))
            if cluster.pause:
                extras.append(Fault("node-pause", after=1, delay_s=pause_delay, role=pause_role))
            if cluster.hold:
                extras.append(Fault("request-hold", after=1))
        else:
            restart = Fault("sink-restart", after=1, delay_s=round(rng.uniform(0.0, 1.0), 3), crash=rng.random() < 0.5)
            extras.append(restart)
    rng.shuffle(extras)
    runs: list[list[Fault]] = [[k] for k in kills_] + [[]]
    for i, extra in enumerate(extras):
        runs[i % len(kills_)].insert(0, extra)  # non-terminal faults first, before the run's kill
        if extra.kind == "failover":  # the standby it promotes stops following one batch before
            runs[i % len(kills_)].insert(0, Fault("link-cut", after=1))
    for run in runs:  # leave a batch for the run's other faults before its kill (two for a failover's cut)
        if len(run) > 1:
            kill = run[-1]
            room = 2 if any(f.kind == "failover" for f in run) else 1
            run[-1] = replace(kill, offset=kill.offset + room) if kill.kind == "point-kill" else kill
            for j, f in enumerate(run[:-1]):
                if f.kind == "task-failure" and run[-1].kind == "point-kill":
                    run[j] = replace(f, offset=min(f.offset, run[-1].offset - 1))
    return Schedule(seed, strategy, workload, tuple(tuple(r) for r in runs), replication=replication)


def naive_schedule(schedule: Schedule) -> Schedule:
    """The baseline's version of ``schedule``: the same kills, a point kill landing at ``F8``
    (the plain writer's one point: after its write, before Spark's commit log)."""
    runs = tuple(
        tuple(
            Fault("point-kill", point="F8", offset=f.offset) if f.kind == "point-kill" else f for f in run if f.terminal
        )
        for run in schedule.runs
    )
    return Schedule(schedule.seed, "naive", schedule.workload, runs, naive=True)


def nondeterministic_schedule(seed: int, strategy: str, workload: Workload, *, kills: int = 4) -> Schedule:
    """The non-deterministic mode's schedule.

    txid-check: a kill at ``F8`` (batch committed in the sink, not in Spark's log), then a run
    that replays that batch and must stop with ``NonDeterministicReplayError`` naming it.
    2pc: kills before (``F3``, ``F4``) and after (``F5``) Spark's commit log and a random
    kill (``kills`` of them, at most 4); every replay computes different values, and the sink must
    still hold one execution.
    """
    rng = _rng(seed, strategy, "-nd")
    if strategy == "txid-check":
        runs: tuple[tuple[Fault, ...], ...] = ((Fault("point-kill", point="F8", offset=rng.randint(1, 2)),), ())
    else:
        pool = [Fault("point-kill", point=p, offset=rng.randint(1, 2)) for p in ("F3", "F4", "F5")]
        pool.append(Fault("random-kill", after=1, delay_s=round(rng.uniform(0.0, 1.5), 3)))
        chosen = pool[1 : 1 + kills] if kills < 4 else pool  # a short schedule keeps F4 (a replay after the manifest)
        rng.shuffle(chosen)
        runs = (*((k,) for k in chosen), ())
    return Schedule(seed, strategy, workload, runs, nondeterministic=True)
