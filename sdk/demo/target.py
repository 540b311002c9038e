"""What the demo needs from a sink: the :class:`DemoTarget` protocol.

The demo writes the same payments two ways into one sink: through eosink (``eosink``) and
through the plain ``foreachBatch`` writer such pipelines use today (``plain``), each through a
fault proxy of its own. A connector offers the demo by implementing this protocol in its folder
and handing it out through its sink profile (:meth:`eosink.profiles.SinkProfile.demo_target`).

* the runner's side: a private server (never the shared one), the address the two fault proxies
  forward to, the job's environment (connection details through each proxy, never in argv),
  what each side holds now (the live view) and at the end (the verdict), and what is left in doubt;
* the job's side (in the Spark driver): the eosink sink and the plain writer's task function.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol

__all__ = ["SIDES", "DemoTarget", "Payment", "Side"]

Payment = tuple[int, str, int]
"""One payment: (id, account, amount)."""

Side = Literal["eosink", "plain"]
SIDES: tuple[Side, ...] = ("eosink", "plain")


class DemoTarget(Protocol):
    """One sink, as the demo drives it (see the module docstring)."""

    title: str
    """What the demo's banner calls the sink: ``an embedded PostgreSQL``."""

    def where(self, side: Side) -> str:
        """What readers of ``side`` look at, for the verdict: ``payments_eosink``."""

    # -- the runner's side --------------------------------------------------------------------

    def start(self) -> None:
        """Start a private server and make both sides' targets empty."""

    def close(self) -> None:
        """Stop the server and remove what :meth:`start` made."""

    def address(self) -> tuple[str, int]:
        """Where the fault proxies forward to."""

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

    def job_plain_writer(self) -> Callable[[Iterator[Any]], Iterator[Any]]:
        """The plain writer's ``mapInArrow`` task: write the partition's rows and commit, nothing else."""

    def scrub(self, text: str) -> str:
        """``text`` without the connection's secrets."""
