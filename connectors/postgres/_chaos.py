"""The chaos harness's PostgreSQL targets (:class:`~eosink.chaos.target.ChaosTarget`).

A private :class:`~eosink.services.postgres.PostgresServer` that the harness restarts and
crashes on purpose (or, ``--topology replicated``, a private primary with two standbys that it
fails over: :class:`ReplicatedPostgresChaosTarget`), :class:`~eosink.connectors.postgres.PostgresSink` with
``commit_mode="atomic"``, Spark's JDBC writer as the plain baseline, and the reads the oracle
and the concurrent reader need. Secrets reach the Spark job through environment variables,
never argv.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink.chaos.oracle import Row
from eosink.chaos.target import Names, ServerSide, Snapshot, oracle_rows
from eosink.connectors.postgres._control import gid_prefix
from eosink.errors import ConfigurationError

__all__ = ["PostgresChaosTarget", "ReplicatedPostgresChaosTarget"]

URL_VAR = "EOSINK_CHAOS_PG_URL"
DIRECT_URL_VAR = "EOSINK_CHAOS_PG_DIRECT_URL"
JARS_VAR = "EOSINK_CHAOS_JARS"


class PostgresChaosTarget(ServerSide):
    """PostgreSQL: a private :class:`~eosink.services.postgres.PostgresServer` (restarted and crashed on
    purpose), :class:`~eosink.connectors.postgres.PostgresSink` with ``commit_mode="atomic"``, and Spark's
    JDBC writer as the baseline."""

    name = "postgres"

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root, "eosink-chaos-pg-")
        self._url = os.environ.get(DIRECT_URL_VAR, "")

    # -- the runner's side -------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.postgres import PostgresServer
        from eosink.services.spark_jars import SparkJars

        SparkJars().fetch("jdbc")  # the baseline's JDBC driver, fetched once into the cache

        def make(root: Path) -> PostgresServer:
            os.chmod(root, 0o755)  # under root the server runs as another user, who must reach its directory
            return PostgresServer(root / "pg", max_prepared=64)

        self.server = self.dir.serve(make)
        self._url = self.server.url

    def _via(self, port: int | None) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        if port is None:
            return self._url
        params = conninfo_to_dict(self._url)
        params.update(host="127.0.0.1", port=str(port))
        return make_conninfo(**{k: str(v) for k, v in params.items()})

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        env = {URL_VAR: self._via(proxy_port), DIRECT_URL_VAR: self._url}
        from eosink.services.spark_jars import SparkJars

        env[JARS_VAR] = SparkJars().spark_conf("jdbc")["spark.jars"]
        return env

    def atomic(self, strategy: str) -> bool:
        from eosink.connectors.postgres import PostgresConfig, PostgresSink
        from eosink.strategies import resolve_strategy

        sink = PostgresSink(PostgresConfig("postgresql://127.0.0.1/x", "t", commit_mode="atomic"))
        return bool(sink.capabilities.atomic_batch_visibility) and resolve_strategy(strategy).transactional

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self._url, autocommit=True, connect_timeout=10)

    def read_rows(self, names: Names) -> list[Row]:
        from psycopg import sql

        # whole rows as JSON: the key column is ``key``, or KEY_ALIAS in a fan-out with a sink reserving ``key``
        statement = sql.SQL("SELECT to_jsonb(t) FROM {} AS t").format(sql.Identifier(names.table))
        with self._connect() as conn:
            try:
                rows = [r for (r,) in conn.execute(statement).fetchall()]
            except Exception as exc:  # no table: nothing was ever written
                if type(exc).__name__ == "UndefinedTable":
                    return []
                raise
        return oracle_rows(rows)

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll function: one REPEATABLE READ snapshot of rows per batch and bundles; None when the
        server is unreachable or the tables do not exist yet (the poll reconnects next time)."""
        import psycopg
        from psycopg import sql

        rows_q = sql.SQL("SELECT batch_id, count(*) FROM {} GROUP BY batch_id").format(sql.Identifier(names.table))
        bundles_q = sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s").format(
            sql.Identifier(names.control_schema, "bundles")
        )
        state: dict[str, Any] = {"conn": None}

        def poll() -> Snapshot | None:
            try:
                conn = state["conn"]
                if conn is None or conn.closed:
                    conn = state["conn"] = psycopg.connect(self._url, autocommit=True, connect_timeout=5)
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    counts = {int(b): int(n) for b, n in conn.execute(rows_q).fetchall()}
                    bundles = frozenset(int(b) for (b,) in conn.execute(bundles_q, (names.app_id,)).fetchall())
                return Snapshot(counts, bundles)
            except psycopg.errors.UndefinedTable:
                return None
            except psycopg.OperationalError:
                if state["conn"] is not None:
                    state["conn"].close()
                state["conn"] = None
                return None

        return poll

    def leftovers(self, names: Names) -> dict[str, int]:
        """In-doubt work of the schedule left behind: prepared transactions, staged rows, txns 'prepared'."""
        import psycopg
        from psycopg import sql

        out = {"prepared": 0, "staged": 0, "txns_prepared": 0}
        prefix = gid_prefix(names.control_schema)
        with self._connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_prepared_xacts WHERE left(gid, %s) = %s", (len(prefix), prefix)
            ).fetchone()
            out["prepared"] = int(row[0]) if row else 0
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE 's\\_%%'",
                (names.control_schema,),
            ).fetchall()
            for (t,) in tables:
                row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(names.control_schema, t)))
                got = row.fetchone()
                out["staged"] += int(got[0]) if got else 0
            try:
                row = conn.execute(
                    sql.SQL("SELECT count(*) FROM {} WHERE app_id = %s AND state = 'prepared'").format(
                        sql.Identifier(names.control_schema, "txns")
                    ),
                    (names.app_id,),
                ).fetchone()
                out["txns_prepared"] = int(row[0]) if row else 0
            except psycopg.errors.UndefinedTable:
                pass
        return out

    def drop(self, names: Names) -> None:
        from psycopg import sql

        with self._connect() as conn:
            prefix = gid_prefix(names.control_schema)
            for (gid,) in conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE left(gid, %s) = %s", (len(prefix), prefix)
            ).fetchall():
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(names.table)))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(names.control_schema)))

    def scrub(self, text: str) -> str:
        for var in (URL_VAR, DIRECT_URL_VAR):
            url = os.environ.get(var)
            if url:
                from eosink.connectors.postgres import PostgresConfig

                text = PostgresConfig(url, "t").scrub(text)
        return text

    # -- the job's side ----------------------------------------------------------------------

    def job_sink(self, table: str, control_schema: str) -> Any:
        """The eosink sink, connected through the fault proxy (``EOSINK_CHAOS_PG_URL``)."""
        from eosink.connectors.postgres import PostgresConfig, PostgresSink

        config = PostgresConfig(
            os.environ[URL_VAR], table, control_schema=control_schema, create_table=True, commit_mode="atomic"
        )
        return PostgresSink(config)

    def job_frame(self, df: Any) -> Any:
        return df  # the table's columns are the job's

    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        """Spark's JDBC writer, appending each batch (at-least-once: what eosink replaces)."""
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(os.environ[DIRECT_URL_VAR])
        jdbc = f"jdbc:postgresql://{params.get('host', '127.0.0.1')}:{params.get('port', 5432)}/{params.get('dbname')}"
        options = {
            "url": jdbc,
            "dbtable": table,
            "user": str(params.get("user", "")),
            "password": str(params.get("password", "")),
            "driver": "org.postgresql.Driver",
        }

        def write(df: Any, batch_id: int) -> None:
            df.write.format("jdbc").options(**options).mode("append").save()

        return write


class ReplicatedPostgresChaosTarget(PostgresChaosTarget):
    """PostgreSQL on a private :class:`~eosink.services.postgres_cluster.PostgresCluster`: a primary, a synchronous
    and an asynchronous standby, each behind fault proxies of its own (``eosink chaos --topology replicated``).

    The job writes through the cluster's multi-host conninfo. A COMMIT's reply is cut by the current
    primary's proxy; a failover SIGKILLs the primary, promotes a standby (the synchronous one under ``sync``
    replication, the other under ``async``) and rewinds the old primary into a standby (``pg_rewind``); a link
    cut stops that standby following, so that an asynchronous failover drops the batches committed since.
    """

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root)
        self.cluster: Any = None
        self.replication = "sync"
        self._cut: str | None = None

    def start(self) -> None:
        from eosink.services.postgres_cluster import PostgresCluster

        root = self.dir.open()
        os.chmod(root, 0o755)  # under root the servers run as another user, who must reach their directories
        self.cluster = PostgresCluster(root / "cluster", mode="sync")
        self._url = self.cluster.url

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
        super().close()

    def restart(self, *, crash: bool) -> None:
        primary = self.cluster.primary()
        if crash:
            self.cluster.kill(primary)
        else:
            self.cluster.stop(primary)
        self.cluster.start(primary)

    def address(self) -> tuple[str, int]:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.cluster.node_url(self.cluster.primary()))
        return str(params["host"]), int(str(params["port"]))

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        return {URL_VAR: self._url, DIRECT_URL_VAR: self._url}

    def fault_proxy(self) -> Any:
        return _PrimaryProxy(self.cluster)

    def set_replication(self, mode: str) -> None:
        self.heal()
        self.replication = mode
        self.cluster.set_mode(mode)

    def _standbys(self) -> tuple[str, str]:
        """(the synchronous standby, the other): under ``async`` replication, as the cluster names them."""
        nodes = [n for n in self.cluster.status().nodes if n.role == "standby"]
        ordered = sorted(nodes, key=lambda n: n.sync_state != "sync")
        if len(ordered) < 2:
            raise ConfigurationError(
                f"The chaos cluster has {len(ordered)} standby(s), not 2: {self.cluster.status().summary()}.",
                "A failover left it short; see the cluster's log.",
            )
        return str(ordered[0].name), str(ordered[1].name)

    def _promoted(self) -> str:
        """The standby a failover promotes: the synchronous one (``sync``), or the one whose link is cut (``async``)."""
        sync, other = self._standbys()
        return sync if self.replication == "sync" else other

    def cut_link(self) -> str:
        """Under ``async`` replication the standby the failover promotes stops following (what it lacks is lost);
        under ``sync`` the other one (commits go on: the primary waits for the synchronous standby only)."""
        _, other = self._standbys()
        self._cut = other
        self.cluster.cut_link(other)
        return f"{other} stops following {self.cluster.primary()}"

    def fail_over(self) -> str:
        from eosink.connectors.postgres.testing import reassemble

        old = self.cluster.primary()
        standby = self._promoted()
        self.cluster.kill(old)
        self.cluster.promote(standby)
        self._cut = None
        timeline = self.cluster.status().node(standby).timeline
        reassemble(self.cluster, "sync" if self.replication == "sync" else "async")
        return f"{old} killed, {standby} promoted (timeline {timeline}), {old} rewound into a standby"

    def heal(self) -> None:
        if self._cut is not None and self.cluster is not None:
            self.cluster.restore_link(self._cut)
            self._cut = None

    def recover_args(self, names: Names) -> list[str]:
        return [
            *("--sink", "postgres", "--conninfo-env", URL_VAR, "--table", names.table),
            *("--control-schema", names.control_schema),
        ]


class _PrimaryProxy:
    """The fault proxy of whichever node is the primary when a cut is armed (the runner's view of the cluster's
    client proxies: one port, one set of counts)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    @property
    def port(self) -> int:
        return int(self.cluster.proxy(self.cluster.primary()).port)

    @property
    def stats(self) -> Any:
        from eosink.services.postgres_cluster import NODE_NAMES
        from eosink.services.proxy import ProxyStats

        cut = [r for name in NODE_NAMES for r in self.cluster.proxy(name).stats.requests_cut]
        return ProxyStats(requests_cut=cut)

    def cut_after_request(self, match: Any, **options: Any) -> None:
        self.cluster.proxy(self.cluster.primary()).cut_after_request(match, **options)

    def passthrough(self) -> None:
        from eosink.services.postgres_cluster import NODE_NAMES

        for name in NODE_NAMES:
            self.cluster.proxy(name).passthrough()

    def close(self) -> None:
        """The cluster's proxies close with the cluster."""
