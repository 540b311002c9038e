"""What the chaos harness needs from a sink: the :class:`ChaosTarget` protocol.

Each connector implements it in its own folder and hands it out through its sink profile
(:meth:`eosink.profiles.SinkProfile.chaos_target`). A target is both sides of one sink for the
harness:

* the runner's side: a private server it may restart or crash (never the shared one), the
  address the fault proxy forwards to and the port it must listen on (0: any; a Kafka broker
  advertises the proxy's address to its clients, so it is fixed), the job's environment (the connection string, through
  the proxy, in an environment variable: never in argv), what the sink holds, whether batches
  are atomic for a strategy (``Capabilities.atomic_batch_visibility`` of the sink, and only for
  transactional strategies: the table in ``docs/design.md``), snapshots for the reader, and
  leftovers (in-doubt work) after a schedule;
* the job's side (in the Spark driver): the eosink sink, the batch's output as that sink takes
  it (a column a sink reserves renamed), and the plain baseline writer.

The commit-request marker the harness's fault proxy cuts on is the profile's
(:attr:`eosink.profiles.SinkProfile.commit_request_marker`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from eosink.chaos.oracle import Row
from eosink.chaos.schedule import ClusterFaults
from eosink.errors import ConfigurationError
from eosink.profiles import get_profile

__all__ = [
    "KEY_ALIAS",
    "ChaosTarget",
    "FollowingProxy",
    "Names",
    "PrivateRoot",
    "Snapshot",
    "commit_marker",
    "get_target",
    "key_of",
    "oracle_rows",
    "snapshot_of",
]

KEY_ALIAS = "chaos_key"
"""The job's ``key`` column under the name a target that reserves ``key`` gives it (Kafka: a column named
``key`` becomes the record's key). In a fan-out every sink gets the renamed column, so every target reads
the key under either name (:func:`key_of`)."""


def key_of(record: Mapping[str, Any]) -> str:
    """The job's key of a record read back, under its own name or :data:`KEY_ALIAS`."""
    return str(record[KEY_ALIAS] if KEY_ALIAS in record else record["key"])


@dataclass(frozen=True)
class Names:
    """Where one schedule writes: its table, control schema and app_id."""

    table: str
    control_schema: str
    app_id: str


@dataclass(frozen=True)
class Snapshot:
    """One consistent read: visible rows per batch_id and the batch_ids with a bundle; ``reader`` names the
    engine that read it, where a target polls with several. A fan-out's (:mod:`eosink.chaos.fanout`) is its
    last sink's, with the other sinks' in ``others`` and ``order_breaks`` saying where a later sink showed a
    batch an earlier one had not committed."""

    rows_per_batch: dict[int, int]
    bundles: frozenset[int]
    reader: str = ""
    order_breaks: tuple[str, ...] = ()
    others: tuple[Snapshot, ...] = ()


def oracle_rows(records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """The job's output read back as records (Parquet, JSON) as the oracle's rows."""
    return [
        (int(r["batch_id"]), key_of(r), int(r["running_sum"]), str(r["concat"]), int(r["n_tokens"])) for r in records
    ]


def snapshot_of(records: Iterable[Mapping[str, Any]], bundles: frozenset[int] | None, reader: str = "") -> Snapshot:
    """One read of records (each with its ``batch_id``) and the batches with a bundle (None: none kept)."""
    counts: dict[int, int] = {}
    for r in records:
        counts[int(r["batch_id"])] = counts.get(int(r["batch_id"]), 0) + 1
    return Snapshot(counts, bundles or frozenset(), reader)


class ChaosTarget(Protocol):
    """One sink, as the harness drives it (see the module docstring)."""

    name: str

    @property
    def cluster_faults(self) -> ClusterFaults | None:
        """The node faults a target of several nodes offers its schedules (topology ``cluster`` or ``ha``); None:
        one server."""
        ...

    def start(self) -> None: ...
    def close(self) -> None: ...
    def restart(self, *, crash: bool) -> None: ...
    def address(self) -> tuple[str, int]: ...
    def proxy_port(self) -> int: ...
    def job_env(self, proxy_port: int | None) -> dict[str, str]: ...
    def atomic(self, strategy: str) -> bool: ...
    def read_rows(self, names: Names) -> list[Row]: ...
    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]: ...
    def leftovers(self, names: Names) -> dict[str, int]: ...
    def drop(self, names: Names) -> None: ...
    def scrub(self, text: str) -> str: ...
    def job_sink(self, table: str, control_schema: str) -> Any: ...
    def job_frame(self, df: Any) -> Any: ...
    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        """The plain baseline's foreachBatch writer (at-least-once). It hits no fault point: the job takes the
        baseline's crash point, ``F8``, after the whole write (after every sink's, in a fan-out)."""
        ...

    # -- a replicated server (topology "replicated"); a target on one server keeps ServerSide's defaults

    def fault_proxy(self) -> Any:
        """The proxy whose ``cut_after_request`` cuts a COMMIT's reply, if the target has its own (a replicated
        server's primary changes); None: the runner puts a FaultProxy in front of :meth:`address`."""
        ...

    def heal(self) -> None:
        """Undo what a run's faults left behind that the next run must not inherit (a cut replication link)."""
        ...

    def set_replication(self, mode: str) -> None:
        """Make the primary wait for a synchronous standby (``sync``) or for none (``async``)."""
        ...

    def cut_link(self) -> str:
        """Cut the replication link of the standby the next failover promotes; what was done."""
        ...

    def fail_over(self) -> str:
        """Kill the primary, promote a standby, rewind the old primary into a standby; what was done."""
        ...

    def recover_args(self, names: Names) -> list[str]:
        """``eosink recover``'s options naming this sink (the connection in an environment variable of
        :meth:`job_env`), for the rewind after a detected loss."""
        ...

    # -- a cluster of nodes (topology "cluster" or "ha"); :meth:`heal` brings every node back after a run

    def kill_node(self, role: str) -> str:
        """Kill the node of ``role`` (one of :attr:`cluster_faults`' roles), to be started again by :meth:`heal`;
        what was done."""
        ...

    def pause_node(self, role: str) -> str:
        """SIGSTOP the node of ``role`` past its session timeout, then resume it; what was done."""
        ...

    def hold_end_txn(self) -> str:
        """Hold the next ``EndTxn`` at the coordinator past the client's timeout, then deliver it; what was done."""
        ...


class _Server(Protocol):
    def start(self) -> Any: ...
    def close(self) -> None: ...


S = TypeVar("S", bound=_Server)


class PrivateRoot:
    """Where a target keeps its private server: the ``root`` it was given (kept), or a temporary
    directory of its own (removed at :meth:`close`)."""

    def __init__(self, root: Path | None, prefix: str) -> None:
        self.root, self.prefix = root, prefix
        self._own: Path | None = None
        self._server: _Server | None = None

    def serve(self, make: Callable[[Path], S]) -> S:
        """Open the root, make a server on it (``make(root)``) and start it; :meth:`close` closes it."""
        server = make(self.open())
        self._server = server
        server.start()
        return server

    def open(self) -> Path:
        if self.root is not None:
            return self.root
        if self._own is not None:
            return self._own
        import tempfile

        self._own = Path(tempfile.mkdtemp(prefix=self.prefix))
        return self._own

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._own is not None:
            import shutil

            shutil.rmtree(self._own, ignore_errors=True)
            self._own = None


class ServerSide:
    """What every chaos target's runner side shares: one private server on a :class:`PrivateRoot`,
    restarted and crashed on purpose, which the fault proxy reaches at its port (the proxy itself may
    listen anywhere: the job is told its address). A target starts its server with ``self.dir.serve``."""

    cluster_faults: ClusterFaults | None = None

    def __init__(self, root: Path | None, prefix: str) -> None:
        self.dir = PrivateRoot(root, prefix)
        self.server: Any = None

    def close(self) -> None:
        self.dir.close()  # the server too
        self.server = None

    def restart(self, *, crash: bool) -> None:
        self.server.restart(crash=crash)

    def address(self) -> tuple[str, int]:
        return "127.0.0.1", int(self.server.port)

    def proxy_port(self) -> int:
        return 0

    def fault_proxy(self) -> Any:
        return None

    def heal(self) -> None:
        return None

    def set_replication(self, mode: str) -> None:
        raise _one_server(self, "replication")

    def cut_link(self) -> str:
        raise _one_server(self, "a replication link to cut")

    def fail_over(self) -> str:
        raise _one_server(self, "a standby to fail over to")

    def recover_args(self, names: Names) -> list[str]:
        raise _one_server(self, "a rewind after a failover")

    def kill_node(self, role: str) -> str:
        raise _one_server(self, "nodes to kill")

    def pause_node(self, role: str) -> str:
        raise _one_server(self, "nodes to pause")

    def hold_end_txn(self) -> str:
        raise _one_server(self, "transaction coordinator to hold a request at")


class FollowingProxy:
    """The runner's fault proxy on a target whose nodes each have their own: a cut is armed at the proxy of the node
    that ``current`` names when it is armed (the one that would answer the commit), counts come from all of them."""

    def __init__(self, proxies: Callable[[], Iterable[Any]], current: Callable[[], Any]) -> None:
        self.proxies, self.current = proxies, current

    @property
    def port(self) -> int:
        """Not the job's way in (it is given every node's proxy): the first one's port."""
        return int(next(iter(self.proxies())).port)

    @property
    def stats(self) -> Any:
        from eosink.services.proxy import ProxyStats

        return ProxyStats(requests_cut=[r for proxy in self.proxies() for r in proxy.stats.requests_cut])

    def cut_after_request(self, match: Any, **options: Any) -> None:
        self.current().cut_after_request(match, **options)

    def passthrough(self) -> None:
        for proxy in self.proxies():
            proxy.passthrough()

    def close(self) -> None:
        """The nodes' proxies close with their cluster."""


def _one_server(target: Any, what: str) -> ConfigurationError:
    return ConfigurationError(
        f"The {getattr(target, 'name', 'sink')} chaos target runs one server: it has no {what}.",
        "Use --topology replicated or --topology cluster with a sink that offers it (eosink chaos --help).",
    )


def get_target(name: str, root: Path | None = None, *, topology: str = "single") -> ChaosTarget:
    """The chaos target of sink ``name`` (the ``--sink`` of ``eosink chaos``), from its profile; ``a+b``: a
    fan-out into sinks ``a`` then ``b`` (:class:`eosink.chaos.fanout.FanOutTarget`). ``topology="replicated"``:
    the sink on a primary with standbys that fail over; ``topology="cluster"``: on a cluster of nodes;
    ``topology="ha"``: on a name service of NameNodes that fails over; where its profile offers that."""
    if "+" in name:
        if topology != "single":
            raise ConfigurationError(
                f"--topology {topology} takes one sink, not the fan-out {name!r}.", "Name one sink with --sink."
            )
        from eosink.chaos.fanout import FanOutTarget

        return FanOutTarget([get_target(part) for part in name.split("+")])
    profile = get_profile(name, "chaos_target")
    if topology not in profile.chaos_topologies:
        offered = ", ".join(profile.chaos_topologies)
        raise ConfigurationError(
            f"The {name} chaos target offers the topologies {offered}, not {topology!r}.",
            "Pick one of those: a replicated PostgreSQL is --sink postgres --topology replicated, a Kafka cluster "
            "--sink kafka --topology cluster, a four-node MinIO --sink s3 (or delta) --topology cluster, an HA HDFS "
            "--sink hdfs --topology ha.",
        )
    if topology == "single":  # a profile written before topologies existed takes no such argument
        return profile.chaos_target(root)
    return profile.chaos_target(root, topology=topology)


def commit_marker(name: str) -> Any:
    """The request whose reply the fault proxy cuts for sink ``name``; a fan-out's: its first sink's (the proxy
    fronts that one)."""
    return get_profile(name.split("+")[0], "chaos_target").commit_request_marker
