"""The PostgreSQL sink's harnesses for the contract suite and the connector's own tests.

:class:`PostgresHarness` writes against the service harness's PostgreSQL (``eosink services up
postgres``, or your own server through ``EOSINK_POSTGRES_URL``); :class:`SecurePostgresHarness`
against the secured one (``postgres-secure``) as its least-privileged writer. A missing server is
an error, never a skip.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres._control import gid_prefix
from eosink.connectors.postgres.grants import writer_grants
from eosink.contracts import Namespace, SinkHarness
from eosink.services import get_service
from eosink.services.postgres import PostgresEndpoint


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
