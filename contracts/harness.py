"""What a connector supplies to the contract suite: a way to make its sink and to read it back.

The suite owns every scenario; a connector adopts it with a harness::

    from eosink.contracts import Namespace, SinkHarness, contract_tests

    class JsonLinesHarness(SinkHarness):
        def make_sink(self, ns: Namespace) -> JsonLinesSink:
            return JsonLinesSink(ns.path / "out")

        def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
            return read_json_lines(ns.path / "out")

    TestJsonLinesContract = contract_tests(JsonLinesHarness())
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from eosink.contract import BatchRef, Bundle, Committable, Sink

__all__ = ["CONTRACT_SCHEMA", "Failover", "Namespace", "SinkHarness"]

#: The columns of every row the suite writes. ``id`` is unique per row of a batch; ``tag``
#: has nulls. Under the idempotent strategy with generated keys, an ``eosink_key`` (string)
#: column is added in front; a reader should return it too (the suite ignores it).
CONTRACT_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("tag", pa.string())])


@dataclass(frozen=True)
class Namespace:
    """Where one test case writes: a short unique ``name`` (safe as a table, topic or prefix name,
    ``[a-z0-9_]``) and a fresh, empty directory ``path`` of its own."""

    name: str
    path: Path


class Failover(ABC):
    """A standby of the sink's store that can take over from it: what the suite's failover cases drive.

    The store starts as a primary with a standby that follows it. :meth:`stop_standby` makes the
    standby stop following, as an asynchronous standby that lags or lost its link does; after
    :meth:`promote_standby` the store *is* that standby (a new server identity, e.g. PostgreSQL's
    next timeline), holding what it had received and nothing after. Sinks made before the
    failover keep what they remember (a transaction id, an epoch); their connections are dropped
    (``close()``), as a failover breaks them.
    """

    @abstractmethod
    def make_sink(self) -> Sink[Any]:
        """A new process's sink on the store's current primary."""

    @abstractmethod
    def commit_losing_reply(
        self, sink: Sink[Any], batch: BatchRef, committables: Sequence[Committable], bundle: Bundle
    ) -> None:
        """``sink.commit(...)`` reaching the primary, with its reply lost; the commit took effect there.

        A sink with a server raises AmbiguousCommitError or TransientError (caught here); one without
        a network (the reference sink) commits and returns: the case asks commit_status as if the
        reply was lost.
        """

    @abstractmethod
    def stop_standby(self) -> None:
        """The standby stops following the primary, once it holds everything committed so far."""

    @abstractmethod
    def promote_standby(self) -> None:
        """The primary dies and the standby is promoted: the store is now what the standby received."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Put the store back together for the next case (the old primary rejoins, say). Default: nothing."""


class SinkHarness(ABC):
    """The connector's side of the contract suite."""

    #: Bytes of (or a ``re.Pattern[bytes]`` matching) the request that commits, for the fault proxy's
    #: ambiguous-commit cut, e.g. ``b"COMMIT"``.
    commit_request_marker: bytes | re.Pattern[bytes] = b"COMMIT"

    @abstractmethod
    def make_sink(self, ns: Namespace) -> Sink[Any]:
        """A new sink for ``ns``, built from configuration only.

        The suite calls it once per simulated process: a crash drops every object of the old
        process, and the next call's sink must find everything the old one made durable. The
        first call's sink may create storage for :data:`CONTRACT_SCHEMA` (a table, a directory).
        """

    @abstractmethod
    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        """What a reader sees in ``ns`` now: one dict per visible row, with every column."""

    def fault_endpoint(self) -> tuple[str, int] | None:
        """``(host, port)`` of the sink's server, for cases that cut connections through a fault proxy.

        None (the default) means the sink has no network endpoint; those cases are skipped,
        and the report says so.
        """
        return None

    def fault_proxy_port(self) -> int:
        """The port the fault proxy must listen on; 0 (the default) lets it pick one.

        A server that tells clients where to connect (Kafka's advertised listeners) needs the
        proxy at the port it advertises, so that every request goes through the proxy.
        """
        return 0

    def make_sink_via(self, ns: Namespace, host: str, port: int) -> Sink[Any]:
        """Like :meth:`make_sink`, but reaching the server through ``host:port`` (the fault proxy)."""
        raise NotImplementedError(f"{type(self).__name__} declares a fault endpoint but not make_sink_via")

    def failover(self, ns: Namespace) -> Failover | None:
        """A store for ``ns`` with a standby to fail over to, for the failover cases; None (the default): the
        harness has none, and those cases are skipped, the report says why."""
        return None

    def cleanup(self, ns: Namespace) -> None:  # noqa: B027 - optional hook
        """Remove what a case left in ``ns`` outside ``ns.path`` (tables, topics). Default: nothing."""
