"""The PostgreSQL connector's one error translator: psycopg's errors into eosink's error tree.

Every part of the connector that talks to the server (the sink's two sides, its status and
recovery reads for ``eosink status``) turns a psycopg error into an eosink error here, so the same
failure is the same class everywhere: a refused login or missing grant is a ConfigurationError
(fix and restart), a dropped connection a TransientError (retry), a refused row a BadRecordError.
The password never reaches the text: every message is scrubbed, and so are the arguments of the
psycopg error the eosink error keeps as its context.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

from eosink.connectors.postgres._control import gid_prefix
from eosink.connectors.postgres.config import PostgresConfig
from eosink.connectors.postgres.grants import Grant, writer_grants
from eosink.errors import (
    AuthenticationError,
    BadRecordError,
    ConfigurationError,
    EosinkError,
    PermissionDeniedError,
    SchemaError,
    TlsError,
    TransientError,
)

__all__ = [
    "LOGIN_FIX",
    "grants_fix",
    "permission_denied",
    "pgbouncer_problem",
    "prepared_disabled",
    "translate",
    "translated",
    "writer_grants_of",
]


@contextmanager
def translated(config: PostgresConfig, what: str, on_error: Callable[[], None] | None = None) -> Iterator[None]:
    """Raise psycopg errors of the block as eosink errors (:func:`translate`); ``on_error`` runs first."""
    try:
        yield
    except psycopg.Error as exc:
        if on_error is not None:
            on_error()
        config.scrub_chain(exc)  # it stays as the translated error's __context__
        raise translate(config, exc, what) from None


def translate(config: PostgresConfig, exc: psycopg.Error, what: str) -> EosinkError:
    """The eosink error for ``exc``, raised while doing ``what`` (for the message)."""
    detail = config.scrub(f"{type(exc).__name__}: {str(exc).strip()}")
    where = f"{what} on PostgreSQL ({config.target[1]!r})"
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return permission_denied(config, where, detail)
    if isinstance(exc, psycopg.errors.ObjectNotInPrerequisiteState) and "prepared" in str(exc):
        return prepared_disabled(where)
    if exc.sqlstate == "53200" and "prepared transactions" in str(exc):
        return TransientError(
            f"{where}: every prepared-transaction slot is taken: {detail}.",
            "Retry later; if it persists, raise max_prepared_transactions, and let recovery resolve in-doubt "
            f"work (prepared gids starting with {gid_prefix(config.control_schema)!r} in pg_prepared_xacts).",
        )
    if isinstance(exc, psycopg.errors.InvalidParameterValue) and "is in the future" in str(exc):
        return TransientError(
            f"{where}: the server does not know a transaction id eosink was given by a server of this cluster "
            f"({detail}): it has not (yet) received that transaction, a standby that lags or was promoted before it "
            "caught up.",
            "eosink asks again while the server catches up; a commit in doubt is settled from the sink's own tables "
            "(its bundle), never by that id. List every server of the cluster in the conninfo with "
            "target_session_attrs=read-write so that eosink reaches the primary.",
        )
    pooled = pgbouncer_problem(str(exc))
    if pooled is not None:
        return ConfigurationError(f"{where}: {detail}. {pooled[0]}", pooled[1])
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        table = ".".join(part for part in config.target if part)
        detail = _STAGING.sub(f"{table} (eosink's staging copy)", detail)
        return BadRecordError(f"{where}: a row was refused: {detail}.", "Fix or filter the offending rows.")
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return SchemaError(f"{where}: {detail}.", "Check the target table; it changed while the query ran.")
    if "permission denied for database" in str(exc):  # CONNECT refused: at login, so no sqlstate
        return permission_denied(config, where, detail)
    tls = _tls_problem(str(exc))
    if tls is not None:
        return TlsError(f"{where}: {tls[0]} ({detail}).", tls[1])
    refused = _login_problem(exc)
    if refused is not None:
        return AuthenticationError(f"{where}: {refused} ({detail}).", LOGIN_FIX)
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return TransientError(f"{where} failed: {detail}.", "Retry; check that the server is up and reachable.")
    return EosinkError(f"{where} failed: {detail}.", "See the PostgreSQL error above.")


def grants_fix(config: PostgresConfig, grants: list[Grant] | None = None) -> str:
    """What an administrator runs to give the writer ``grants`` (default: all it needs), as quoted SQL."""
    grants = writer_grants_of(config) if grants is None else grants
    statements = "; ".join(g.sql_text() for g in grants)
    return (
        f"As an administrator, grant the writer what it needs: {statements} "
        "(the connector's docs list each grant and why; then restart the query)."
    )


def writer_grants_of(config: PostgresConfig) -> list[Grant]:
    """:func:`writer_grants` for the user and database the conninfo names."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(config.conninfo)
    user = str(params.get("user") or "the_writer")
    return writer_grants(config, user, str(params.get("dbname") or user))


def permission_denied(config: PostgresConfig, where: str, detail: str) -> PermissionDeniedError:
    """The error for a refused privilege: the grants on the object the server named, and their SQL."""
    grants = writer_grants_of(config)
    named = _DENIED.search(detail)
    if named is not None:
        kind = "table" if named.group(1) in ("relation", "sequence") else named.group(1)
        on_it = [g for g in grants if g.on == (kind, named.group(2).strip('".'))]
        if kind == "database" and "CONNECT privilege" not in detail:  # CREATE SCHEMA, not the login
            on_it = [g for g in grants if g.name == "control-schema"]
        grants = on_it or grants
    permission = " or ".join(g.permission for g in grants)
    return PermissionDeniedError(f"{where} was refused: {detail}.", grants_fix(config, grants), permission=permission)


_STAGING = re.compile(r"\b[st]_[0-9a-f]{12,}\b")  # a staging table's name (ctl.s_<hash>, ctl.t_<hash>)
_DENIED = re.compile(r"permission denied for (table|schema|database|relation|sequence) (\S+)")


_PGBOUNCER = (
    (
        "unsupported startup parameter",
        "PgBouncer refused a startup parameter the sink sends (options: TimeZone and timeouts).",
    ),
    ("statement pooling mode", "PgBouncer in statement pooling mode forbids multi-statement transactions."),
    ('prepared statement "_pg3_', "A connection pooler (PgBouncer in transaction pooling) lost a prepared statement."),
)


def pgbouncer_problem(message: str) -> tuple[str, str] | None:
    """(problem, fix) when ``message`` is a connection pooler's refusal, else None."""
    for marker, problem in _PGBOUNCER:
        if marker in message:
            return (
                problem,
                "Connect the sink to PostgreSQL directly or through a session-pooling port; with PgBouncer's "
                "transaction pooling, add 'ignore_startup_parameters = options' to pgbouncer.ini and use the "
                "txid-check strategy (it needs no prepared transactions, and pg_xact_status works from any "
                "backend); statement pooling supports none of eosink's transactional strategies.",
            )
    return None


def prepared_disabled(where: str) -> ConfigurationError:
    return ConfigurationError(
        f"PostgreSQL has max_prepared_transactions = 0 ({where}): PREPARE TRANSACTION is disabled, which the "
        "2pc strategy needs (common on managed services).",
        "Use the txid-check strategy (no prepared transactions; exactly-once for deterministic queries, "
        "non-deterministic replays are detected) or the idempotent strategy; or set max_prepared_transactions in "
        "postgresql.conf to at least 2 x the partitions of a batch and restart the server.",
    )


LOGIN_FIX = (
    "Check the user, password and database of the conninfo (a password may also come from PGPASSWORD or "
    "~/.pgpass), and that pg_hba.conf admits this client; then restart the query."
)
_LOGIN_STATES = {"28P01", "28000", "3D000"}  # bad password, not authorised, no such database
_LOGIN_MARKERS = (
    "password authentication failed",
    "authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
)


def _login_problem(exc: psycopg.Error) -> str | None:
    """What was wrong with the login, when ``exc`` is a refused connection (not an outage), else None."""
    if exc.sqlstate in _LOGIN_STATES:
        return "the server refused the login"
    text = str(exc)
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None and "FATAL" in text:
        for marker in _LOGIN_MARKERS:
            if marker in text:
                return "the server refused the login"
    return None


_TLS = (
    (
        "certificate verify failed",
        "the server's certificate is not signed by a CA this client trusts",
        "Point sslrootcert at the CA that signed the server's certificate (keep sslmode=verify-full).",
    ),
    (
        "does not match host name",
        "the server's certificate names another host than the one connected to",
        "Connect by a host name the certificate carries (or have the server's certificate reissued for it).",
    ),
    (
        "no encryption",
        "the server accepts only TLS connections and this one was not encrypted",
        "Set sslmode=verify-full (with sslrootcert) in the conninfo.",
    ),
    (
        "server does not support SSL",
        "the conninfo requires TLS but the server does not offer it",
        "Enable ssl on the server, or connect to the server that does.",
    ),
    (
        "root certificate file",
        "the CA file named by sslrootcert cannot be read",
        "Point sslrootcert at a readable PEM file on every driver and executor host.",
    ),
)


def _tls_problem(message: str) -> tuple[str, str] | None:
    """(problem, fix) when ``message`` is a failed TLS handshake or a TLS requirement not met, else None."""
    for marker, problem, fix in _TLS:
        if marker in message:
            return problem, fix
    return None
