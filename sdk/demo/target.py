"""What the demo needs from a sink: the :class:`DemoTarget` protocol.

The demo writes the same payments two ways into one sink: through eosink (``eosink``) and
through the plain ``foreachBatch`` writer such pipelines use today (``plain``), each through a
fault proxy of its own. A connector offers the demo by implementing this protocol in its folder
and handing it out through its sink profile (:meth:`eosink.profiles.SinkProfile.demo_target`).

* the runner's side: a private server (never the shared one), the address each side's fault proxy
  forwards to (and the port it must listen on, where a broker advertises it), the job's
  environment (connection details through each proxy, never in argv),
  what each side holds now (the live view) and at the end (the verdict), and what is left in doubt;
* the job's side (in the Spark driver): the eosink sink and the plain writer's ``foreachBatch``
  function. Extra jars the plain writer needs (Spark's Kafka sink, say) go in the job's
  environment as :data:`JARS_VAR`, static settings it needs (a session extension) as :data:`CONF_VAR`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Literal, Protocol

__all__ = ["CONF_VAR", "JARS_VAR", "SIDES", "DemoTarget", "Payment", "Side"]

Payment = tuple[int, str, int]
"""One payment: (id, account, amount)."""

Side = Literal["eosink", "plain"]
SIDES: tuple[Side, ...] = ("eosink", "plain")

JARS_VAR = "EOSINK_DEMO_JARS"
"""The job's environment variable for extra jars (comma-separated paths) its Spark session loads."""
CONF_VAR = "EOSINK_DEMO_SPARK_CONF"
"""The job's environment variable for static Spark settings (JSON) the plain writer needs beside its jars."""


class DemoTarget(Protocol):
    """One sink, as the demo drives it (see the module docstring)."""

    title: str
    """What the demo's banner calls the sink: ``an embedded PostgreSQL``."""

    plain_title: str
    """What the verdict calls the plain writer: ``plain foreachBatch``, ``Spark's Kafka sink``."""

    plain_cuts: bool
    """Whether a COMMIT reply cut on the plain writer's connection makes it write again. False when
    its client retries without a duplicate (an idempotent Kafka producer): the demo then crashes a
    run before Spark's commit log instead, where a replay writes the batch again."""

    def where(self, side: Side) -> str:
        """What readers of ``side`` look at, for the verdict: ``payments_eosink``."""

    # -- the runner's side --------------------------------------------------------------------

    def start(self) -> None:
        """Start a private server and make both sides' targets empty."""

    def close(self) -> None:
        """Stop the server and remove what :meth:`start` made."""

    def address(self, side: Side) -> tuple[str, int]:
        """Where ``side``'s fault proxy forwards to."""

    def proxy_port(self, side: Side) -> int:
        """The port ``side``'s fault proxy listens on: 0 for any free port, or the port a broker
        advertises to its clients (so that every connection after the first goes through it too)."""

    def job_env(self, proxy_ports: dict[Side, int]) -> dict[str, str]:
        """The Spark job's environment: each side reaches the server through its own proxy."""

    def counts(self) -> dict[Side, tuple[int, int]] | None:
        """Per side, (payments visible, duplicated ids) now; None while the server is unreachable."""

    def payments(self, side: Side) -> Counter[Payment]:
        """Every payment ``side`` holds at the end."""

    def in_doubt(self) -> int:
        """Prepared or staged work left behind (0 when eosink finished cleanly)."""

    # -- the job's side --------------------------------------------------------------------------

    def job_sink(self, app_id: str) -> Any:
        """The eosink sink (from the job's environment)."""

    def job_plain_writer(self) -> Callable[[Any, int], None]:
        """The plain writer as a ``foreachBatch`` function: write the batch's rows from the executors and
        commit, nothing else (at-least-once, what eosink replaces)."""

    def scrub(self, text: str) -> str:
        """``text`` without the connection's secrets."""
