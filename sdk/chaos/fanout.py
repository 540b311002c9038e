"""The chaos harness over a fan-out: one query into several sinks (``make chaos SINK=postgres+kafka``).

:class:`FanOutTarget` is a :class:`~eosink.chaos.target.ChaosTarget` made of the sinks' own targets,
in the fan-out's commit order (:mod:`eosink.fanout`):

* each sink has its private server; a "sink crash" fault crashes (or restarts) all of them at once;
* the fault proxy fronts the first sink (its commit request, the first of each batch, is the one
  whose reply is cut); the others are reached directly;
* the job writes through ``eosink.foreach_batch({name: sink, ...})``; the baseline writes each sink in
  turn with its plain Spark writer;
* the oracle checks each sink on its own (:meth:`FanOutTarget.rows_by_sink`): lost and duplicated
  rows add up over the sinks, and the verdict keeps each sink's;
* the reader reads the sinks from the last to the first in each poll and reports an **order break**
  when a later sink shows rows of a batch that an earlier sink, read after it, has not committed:
  the fan-out's promise under 2pc and txid-check. Each sink's partial views count too, as failures
  only where every sink declares atomic batches (:meth:`FanOutTarget.atomic`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from eosink.chaos.oracle import Row
from eosink.chaos.target import ChaosTarget, Names, Snapshot
from eosink.errors import ConfigurationError

__all__ = ["FanOutTarget", "member_names"]

JARS_VAR = "EOSINK_CHAOS_JARS"
"""Every target's baseline jars travel in this one variable: the fan-out's job gets all of them."""


def member_names(names: Names, member: str) -> Names:
    """Where sink ``member`` of a fan-out schedule writes: the schedule's names, the app_id the fan-out's."""
    from eosink.fanout import member_app_id

    return Names(names.table, names.control_schema, member_app_id(names.app_id, member))


class FanOutTarget:
    """Several chaos targets driven as one fan-out (see the module docstring)."""

    cluster_faults = None  # every member on one server of its own

    def __init__(self, members: Sequence[ChaosTarget]) -> None:
        self.members = list(members)
        self.name = "+".join(m.name for m in self.members)

    # -- the runner's side -------------------------------------------------------------------

    def start(self) -> None:
        for m in self.members:
            m.start()

    def close(self) -> None:
        for m in self.members:
            m.close()

    def restart(self, *, crash: bool) -> None:
        for m in self.members:
            m.restart(crash=crash)

    def address(self) -> tuple[str, int]:
        return self.members[0].address()

    def fault_proxy(self) -> Any:
        return None  # the runner's proxy fronts the first sink

    def heal(self) -> None:
        for m in self.members:
            m.heal()

    def set_replication(self, mode: str) -> None:
        raise _single()

    def cut_link(self) -> str:
        raise _single()

    def fail_over(self) -> str:
        raise _single()

    def recover_args(self, names: Names) -> list[str]:
        raise _single()

    def kill_node(self, role: str) -> str:
        raise _single()

    def pause_node(self, role: str) -> str:
        raise _single()

    def hold_end_txn(self) -> str:
        raise _single()

    def proxy_port(self) -> int:
        return self.members[0].proxy_port()

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        env: dict[str, str] = {}
        jars: list[str] = []
        for n, m in enumerate(self.members):
            own = m.job_env(proxy_port if n == 0 else None)
            jars += [j for j in own.pop(JARS_VAR, "").split(",") if j and j not in jars]
            env.update(own)
        return {**env, JARS_VAR: ",".join(jars)} if jars else env

    def atomic(self, strategy: str) -> bool:
        return all(m.atomic(strategy) for m in self.members)

    def read_rows(self, names: Names) -> list[Row]:
        """The first sink's rows (the oracle checks every sink through :meth:`rows_by_sink`)."""
        return self.members[0].read_rows(member_names(names, self.members[0].name))

    def rows_by_sink(self, names: Names) -> dict[str, list[Row]]:
        """Each sink's rows, by its name in the fan-out."""
        return {m.name: m.read_rows(member_names(names, m.name)) for m in self.members}

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll: every sink read, the last first; the last sink's view, with the order breaks found."""
        polls = [(m.name, m.snapshotter(member_names(names, m.name))) for m in self.members]

        def poll() -> Snapshot | None:
            snaps = []
            for name, read in reversed(polls):
                snap = read()
                if snap is None:
                    return None  # a server is down (restarted on purpose): this poll tells nothing
                snaps.append((name, snap))
            snaps.reverse()
            breaks = []
            for (first, before), (later, after) in itertools.pairwise(snaps):
                for batch_id in sorted(after.rows_per_batch.keys() - before.bundles):
                    breaks.append(f"batch {batch_id} visible in {later} before {first} committed it")
            last = snaps[-1][1]
            others = tuple(snap for _, snap in snaps[:-1])
            return Snapshot(last.rows_per_batch, last.bundles, last.reader, tuple(breaks), others)

        return poll

    def leftovers(self, names: Names) -> dict[str, int]:
        found: dict[str, int] = {}
        for m in self.members:
            for key, n in m.leftovers(member_names(names, m.name)).items():
                found[f"{m.name}.{key}"] = n
        return found

    def drop(self, names: Names) -> None:
        for m in self.members:
            m.drop(member_names(names, m.name))

    def scrub(self, text: str) -> str:
        for m in self.members:
            text = m.scrub(text)
        return text

    # -- the job's side ------------------------------------------------------------------------

    def job_sink(self, table: str, control_schema: str) -> Any:
        return {m.name: m.job_sink(table, control_schema) for m in self.members}

    def job_frame(self, df: Any) -> Any:
        return functools.reduce(lambda frame, m: m.job_frame(frame), self.members, df)

    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        writers = [m.job_naive_writer(table) for m in self.members]

        def write(df: Any, batch_id: int) -> None:
            for w in writers:
                w(df, batch_id)

        return write


def _single() -> ConfigurationError:
    return ConfigurationError("A fan-out's chaos runs on servers of one node each.", "Drop --topology.")
