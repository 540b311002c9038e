"""The PostgreSQL sink's harnesses for the contract suite and the connector's own tests.

:class:`PostgresHarness` writes against the service harness's PostgreSQL (``eosink services up
postgres``, or your own server through ``EOSINK_POSTGRES_URL``); :class:`SecurePostgresHarness`
against the secured one (``postgres-secure``) as its least-privileged writer;
:class:`ReplicatedPostgresHarness` against a primary with a synchronous and an asynchronous standby
(``postgres-replicated``), through the multi-host conninfo, and fails it over for the suite's
failover cases (:class:`PostgresFailover`). A missing server is an error, never a skip.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres._control import gid_prefix
from eosink.connectors.postgres.grants import writer_grants
from eosink.contract import BatchRef, Bundle, Committable, Sink
from eosink.contracts import Failover, Namespace, SinkHarness
from eosink.errors import AmbiguousCommitError, ServiceError, TransientError
from eosink.services import get_service
from eosink.services.postgres import PostgresEndpoint

if TYPE_CHECKING:
    from eosink.services.postgres_cluster import Mode, ReplicatedCluster


class PostgresHarness(SinkHarness):
    """One target table ``ns.name`` (created from the first batch) and one control schema per namespace.

    The endpoint is resolved at first use, not at import (the suite class is built at import).
    """

    #: The batch's commit is the bare ``COMMIT`` (a simple-query message: ``COMMIT`` + NUL) that
    #: ends the one transaction moving the staged rows and writing the bundle; the earlier
    #: ``COMMIT PREPARED 'gid'`` statements only move participants' work into staging.
    commit_request_marker = b"COMMIT\x00"

    def __init__(self, **options: Any) -> None:
        self.options = options  # PostgresConfig options every sink of this harness gets
        self._endpoint: PostgresEndpoint | None = None
        self._admin: psycopg.Connection[dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def endpoint(self) -> PostgresEndpoint:
        if self._endpoint is None:
            self._endpoint = get_service("postgres").endpoint()  # ServiceError: start the server
        return self._endpoint

    def config(self, ns: Namespace, **options: Any) -> PostgresConfig:
        options = {"create_table": True, **self.options, **options}
        return PostgresConfig(self.endpoint().url, table=ns.name, control_schema=f"{ns.name}_ctl", **options)

    def make_sink(self, ns: Namespace) -> PostgresSink:
        return PostgresSink(self.config(ns))

    def fault_endpoint(self) -> tuple[str, int] | None:
        endpoint = self.endpoint()
        return endpoint.host, endpoint.port

    def make_sink_via(self, ns: Namespace, host: str, port: int) -> PostgresSink:
        return PostgresSink(self.config(ns).with_address(host, port))

    def admin(self) -> psycopg.Connection[dict[str, Any]]:
        """A shared autocommit connection for reading back and cleaning up."""
        if self._admin is None or self._admin.closed:
            self._admin = psycopg.connect(self.endpoint().url, autocommit=True, row_factory=dict_row)
        return self._admin

    def read_rows(self, schema: str | None, table: str) -> list[dict[str, Any]]:
        name = sql.Identifier(table) if schema is None else sql.Identifier(schema, table)
        with self._lock:
            conn = self.admin()
            found = conn.execute(
                "SELECT to_regclass(CASE WHEN %(s)s::text IS NULL THEN format('%%I', %(t)s::text) "
                "ELSE format('%%I.%%I', %(s)s::text, %(t)s::text) END) IS NOT NULL AS found",
                {"s": schema, "t": table},
            ).fetchone()
            if not (found and found["found"]):
                return []
            return conn.execute(sql.SQL("SELECT * FROM {}").format(name)).fetchall()

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        return self.read_rows(None, ns.name)

    def cleanup(self, ns: Namespace) -> None:
        self.drop(f"{ns.name}_ctl", [sql.Identifier(ns.name)])

    def drop(self, control_schema: str, tables: list[sql.Identifier]) -> None:
        """Roll back the namespace's prepared transactions (they hold locks), then drop its tables."""
        prefix = gid_prefix(control_schema)
        with self._lock:
            conn = self.admin()
            gids = conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND left(gid, %s) = %s",
                (len(prefix), prefix),
            ).fetchall()
            for row in gids:
                with contextlib.suppress(psycopg.errors.UndefinedObject):
                    conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(row["gid"])))
            conn.execute("SET lock_timeout = '20s'")
            for table in tables:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(table))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(control_schema)))


class SecurePostgresHarness(PostgresHarness):
    """The suite as the secured server's ``writer``: TLS with ``sslmode=verify-full``, scram-sha-256, and
    exactly the documented grants for each namespace (:func:`~eosink.connectors.postgres.grants.writer_grants`).

    No fault proxy: it would have to terminate TLS, so the network-fault cases run on the plain server.
    """

    def endpoint(self) -> PostgresEndpoint:
        if self._endpoint is None:
            self._endpoint = get_service("postgres-secure").endpoint()
        return self._endpoint

    def config(self, ns: Namespace, **options: Any) -> PostgresConfig:
        from eosink.services.postgres_secure import SecurePostgresEndpoint

        endpoint = self.endpoint()
        assert isinstance(endpoint, SecurePostgresEndpoint)
        options = {"create_table": True, **self.options, **options}
        config = PostgresConfig(endpoint.writer_url(), table=ns.name, control_schema=f"{ns.name}_ctl", **options)
        self.grant(config, endpoint.writer)
        return config

    def grant(self, config: PostgresConfig, role: str, *, leave_out: str | None = None) -> None:
        """Run ``config``'s documented grants for ``role`` as the administrator (all but ``leave_out``)."""
        with self._lock:
            admin = self.admin()
            for grant in writer_grants(config, role, self.endpoint().dbname):
                if grant.name != leave_out:
                    admin.execute(grant.statement)

    def fault_endpoint(self) -> tuple[str, int] | None:
        return None


class PostgresFailover(Failover):
    """A failover of the replicated service's cluster, as the contract suite's failover cases drive it.

    The standby that takes over is an asynchronous one: the cluster runs in ``async`` mode for the
    case, the standby stops following by its replication link being cut (after it replayed
    everything so far), and it is promoted after the primary is SIGKILLed. A commit's reply is lost
    by the primary's client proxy cutting the connection after the batch's ``COMMIT`` reached it.
    :meth:`close` puts the cluster back: every node down or left behind is rewound into a standby of
    the new primary (pg_rewind), links restored, synchronous mode again.
    """

    def __init__(self, harness: ReplicatedPostgresHarness, ns: Namespace) -> None:
        self.harness, self.ns = harness, ns
        self.cluster = harness.cluster()
        self.cluster.set_mode("async")
        self.old_primary = self.cluster.primary()
        standbys = [n.name for n in self.cluster.status().nodes if n.role == "standby"]
        if not standbys:
            raise AssertionError(f"the replicated cluster has no standby to fail over to: {self.cluster.status()}")
        self.standby = standbys[-1]

    def make_sink(self) -> PostgresSink:
        return self.harness.make_sink(self.ns)

    def commit_losing_reply(
        self, sink: Sink[Any], batch: BatchRef, committables: Sequence[Committable], bundle: Bundle
    ) -> None:
        proxy = self.cluster.proxy(self.cluster.primary())
        proxy.cut_after_request(self.harness.commit_request_marker)
        try:
            sink.commit(batch, committables, bundle)
        except (AmbiguousCommitError, TransientError):
            pass
        else:
            raise AssertionError("the commit returned although its reply was to be cut")
        finally:
            proxy.passthrough()

    def stop_standby(self) -> None:
        self.cluster.wait_replayed(self.standby)
        self.cluster.cut_link(self.standby)

    def promote_standby(self) -> None:
        self.cluster.kill(self.old_primary)
        self.cluster.promote(self.standby)
        self.harness.forget_admin()

    def close(self) -> None:
        reassemble(self.cluster)


def reassemble(cluster: ReplicatedCluster, mode: Mode = "sync") -> None:
    """Make every node but the primary a streaming standby of it again, links restored, in ``mode``.

    A node that is down, paused, a zombie primary, or a standby that cannot follow (it had WAL the new
    primary never had) is rewound into a standby (pg_rewind)."""
    primary = cluster.primary()
    for node in cluster.status().nodes:
        if node.name == primary:
            continue
        if node.role == "paused":
            cluster.resume(node.name)
        cluster.restore_link(node.name)
        if node.role == "standby":
            try:
                cluster.wait_streaming(node.name, timeout_s=15.0)
                continue
            except ServiceError:  # it cannot follow the new primary's timeline without a rewind
                pass
        if node.role in ("primary", "paused"):
            cluster.kill(node.name)  # a zombie old primary: pg_rewind wants it stopped
        cluster.rejoin(node.name)
    cluster.set_mode(mode)


class ReplicatedPostgresHarness(PostgresHarness):
    """The suite against the ``postgres-replicated`` service: a primary, a synchronous and an asynchronous
    standby, reached through the multi-host conninfo (``target_session_attrs=read-write``), each node behind
    a fault proxy of its own. Its :meth:`failover` drives a real failover to the asynchronous standby."""

    def endpoint(self) -> PostgresEndpoint:
        if self._endpoint is None:
            from eosink.services.postgres_replicated import ReplicatedPostgresEndpoint

            endpoint = get_service("postgres-replicated").endpoint()
            assert isinstance(endpoint, ReplicatedPostgresEndpoint)
            self._endpoint = endpoint
        return self._endpoint

    def cluster(self) -> ReplicatedCluster:
        """The running cluster, through its supervisor."""
        from eosink.services.postgres_replicated import ClusterControl, ReplicatedPostgresEndpoint

        endpoint = self.endpoint()
        assert isinstance(endpoint, ReplicatedPostgresEndpoint)
        return ClusterControl(endpoint)

    def fault_endpoint(self) -> tuple[str, int] | None:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.cluster().node_url(self.cluster().primary()))
        return str(params["host"]), int(str(params["port"]))

    def forget_admin(self) -> None:
        """Drop the reading connection (it reached the old primary)."""
        with self._lock:
            if self._admin is not None:
                with contextlib.suppress(Exception):
                    self._admin.close()
            self._admin = None

    def failover(self, ns: Namespace) -> PostgresFailover:
        return PostgresFailover(self, ns)
