"""The demo into several sinks at once (``eosink demo --sink postgres+kafka``): one query, one pass per batch.

:class:`FanOutDemoTarget` is a :class:`~eosink.demo.target.DemoTarget` made of the sinks' own demo
targets, in commit order. eosink's side writes each batch through one fan-out
(``eosink.foreach_batch({name: sink, ...})``); the plain side is what a user writes today, one
``foreachBatch`` that caches the batch and calls each sink's plain writer in turn.

* The demo's fault proxies front the first sink (its COMMIT reply is the one the scenario cuts);
  each later sink gets passthrough proxies of its own, started here, so that its clients reach it
  as the sink's own demo wires them (a broker advertises its proxy's port).
* The live view counts what every sink of a side holds: the fewest rows, the duplicates of all.
* The verdict is per sink (:meth:`FanOutDemoTarget.payments_by_sink`): every sink of eosink's side
  must hold every payment once.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from eosink.demo.target import CONF_VAR, JARS_VAR, SIDES, DemoTarget, Payment, Side
from eosink.errors import ConfigurationError

__all__ = ["FanOutDemoTarget", "demo_target"]


def demo_target(name: str) -> DemoTarget:
    """The demo target of sink ``name``, from its profile; ``a+b``: the fan-out into those sinks in that order."""
    from eosink.profiles import get_profile

    if "+" in name:
        return FanOutDemoTarget([(part, demo_target(part)) for part in name.split("+")])
    return get_profile(name, "demo_target").demo_target()


def commit_request_marker(name: str) -> bytes | re.Pattern[bytes] | None:
    """The bytes that start sink ``name``'s commit request on the wire (a fan-out's: its first sink's)."""
    from eosink.profiles import get_profile

    marker: bytes | re.Pattern[bytes] | None = get_profile(name.split("+")[0], "demo_target").commit_request_marker
    return marker


class FanOutDemoTarget:
    """Several demo targets driven as one fan-out (see the module docstring)."""

    def __init__(self, members: Sequence[tuple[str, DemoTarget]]) -> None:
        if len(members) < 2:
            raise ValueError("a fan-out demo needs at least two sinks")
        self.names = [name for name, _ in members]
        self.members = [target for _, target in members]
        first = self.members[0]
        self.title = ", then ".join(m.title for m in self.members)
        self.plain_title = "plain foreachBatch (each sink in turn)"
        self.plain_cuts = first.plain_cuts
        self._proxies: list[dict[Side, Any]] = []

    def where(self, side: Side) -> str:
        return " and ".join(m.where(side) for m in self.members)

    # -- the runner's side --------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.proxy import FaultProxy

        for n, member in enumerate(self.members):
            member.start()
            if n:
                self._proxies.append(
                    {
                        side: FaultProxy(*member.address(side), listen_port=member.proxy_port(side)).start()
                        for side in SIDES
                    }
                )

    def close(self) -> None:
        for proxies in self._proxies:
            for proxy in proxies.values():
                proxy.close()
        self._proxies.clear()
        for member in reversed(self.members):
            member.close()

    def address(self, side: Side) -> tuple[str, int]:
        return self.members[0].address(side)

    def proxy_port(self, side: Side) -> int:
        return self.members[0].proxy_port(side)

    def job_env(self, proxy_ports: dict[Side, int]) -> dict[str, str]:
        """Every sink's environment: the first through the demo's proxies, each later one through its own; their
        extra jars joined, their Spark settings merged."""
        envs = [self.members[0].job_env(proxy_ports)]
        for member, proxies in zip(self.members[1:], self._proxies, strict=True):
            envs.append(member.job_env({side: proxy.port for side, proxy in proxies.items()}))
        env: dict[str, str] = {}
        jars: list[str] = []
        conf: dict[str, Any] = {}
        for name, one in zip(self.names, envs, strict=True):
            jars += [j for j in one.pop(JARS_VAR, "").split(",") if j and j not in jars]
            conf.update(json.loads(one.pop(CONF_VAR, "") or "{}"))
            clash = sorted(k for k, v in one.items() if k in env and env[k] != v)
            if clash:
                raise ConfigurationError(
                    f"The demo's sink {name!r} reaches its server through the same variables as an earlier sink "
                    f"({', '.join(clash)}), with other values: the two cannot run in one fan-out demo.",
                    "Pair sinks of different servers, e.g. --sink postgres+kafka.",
                )
            env.update(one)
        if jars:
            env[JARS_VAR] = ",".join(jars)
        if conf:
            env[CONF_VAR] = json.dumps(conf)
        return env

    def counts(self) -> dict[Side, tuple[int, int]] | None:
        per_sink = [m.counts() for m in self.members]
        if any(c is None for c in per_sink):
            return None
        return {
            side: (min(c[side][0] for c in per_sink if c), sum(c[side][1] for c in per_sink if c)) for side in SIDES
        }

    def payments_by_sink(self, side: Side) -> dict[str, Counter[Payment]]:
        """Every payment each sink of ``side`` holds at the end, by sink name."""
        return {name: m.payments(side) for name, m in zip(self.names, self.members, strict=True)}

    def payments(self, side: Side) -> Counter[Payment]:
        """What ``side``'s first sink holds (the verdict reads :meth:`payments_by_sink`)."""
        return self.members[0].payments(side)

    def in_doubt(self) -> int:
        return sum(m.in_doubt() for m in self.members)

    # -- the job's side --------------------------------------------------------------------------

    def job_sink(self, app_id: str) -> Any:
        """Every sink, by name, in commit order: ``eosink.foreach_batch`` makes them a fan-out."""
        from eosink.fanout import member_app_id

        return {name: m.job_sink(member_app_id(app_id, name)) for name, m in zip(self.names, self.members, strict=True)}

    def job_plain_writer(self) -> Callable[[Any, int], None]:
        writers = [m.job_plain_writer() for m in self.members]

        def write(df: Any, batch_id: int) -> None:
            df.persist()
            try:
                for writer in writers:
                    writer(df, batch_id)
            finally:
                df.unpersist()

        return write

    def scrub(self, text: str) -> str:
        for member in self.members:
            text = member.scrub(text)
        return text
