"""The PostgreSQL connector's one error translator: psycopg's errors into eosink's error tree.

Every part of the connector that talks to the server (the sink's two sides, its status and
recovery reads for ``eosink status``) turns a psycopg error into an eosink error here, so the same
failure is the same class everywhere: a refused login or missing grant is a ConfigurationError
(fix and restart), a dropped connection a TransientError (retry), a refused row a BadRecordError.
The password never reaches the text: every message is scrubbed, and so are the arguments of the
psycopg error the eosink error keeps as its context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from eosink.connectors.postgres._control import gid_prefix
from eosink.connectors.postgres.config import PostgresConfig
from eosink.errors import BadRecordError, ConfigurationError, EosinkError, SchemaError, TransientError

__all__ = ["LOGIN_FIX", "grants_fix", "pgbouncer_problem", "prepared_disabled", "translate", "translated"]


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
        return ConfigurationError(f"{where} was refused: {detail}.", grants_fix(config))
    if isinstance(exc, psycopg.errors.ObjectNotInPrerequisiteState) and "prepared" in str(exc):
        return prepared_disabled(where)
    if exc.sqlstate == "53200" and "prepared transactions" in str(exc):
        return TransientError(
            f"{where}: every prepared-transaction slot is taken: {detail}.",
            "Retry later; if it persists, raise max_prepared_transactions, and let recovery resolve in-doubt "
            f"work (prepared gids starting with {gid_prefix(config.control_schema)!r} in pg_prepared_xacts).",
        )
    pooled = pgbouncer_problem(str(exc))
    if pooled is not None:
        return ConfigurationError(f"{where}: {detail}. {pooled[0]}", pooled[1])
    if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
        return BadRecordError(f"{where}: a row was refused: {detail}.", "Fix or filter the offending rows.")
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return SchemaError(f"{where}: {detail}.", "Check the target table; it changed while the query ran.")
    refused = _login_problem(exc)
    if refused is not None:
        return ConfigurationError(f"{where}: {refused} ({detail}).", LOGIN_FIX)
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return TransientError(f"{where} failed: {detail}.", "Retry; check that the server is up and reachable.")
    return EosinkError(f"{where} failed: {detail}.", "See the PostgreSQL error above.")


def grants_fix(config: PostgresConfig) -> str:
    """The least-privilege grants, as SQL for an administrator (names quoted by psycopg)."""
    from psycopg.conninfo import conninfo_to_dict

    user = sql.Identifier(str(conninfo_to_dict(config.conninfo).get("user") or "the_writer"))
    schema, table = config.target
    target = sql.Identifier(table) if schema is None else sql.Identifier(schema, table)
    rights = sql.SQL("SELECT, INSERT, UPDATE" if config.mode == "upsert" else "SELECT, INSERT")
    grants = sql.SQL(
        "CREATE SCHEMA {ctl} AUTHORIZATION {user}; GRANT {rights} ON {target} TO {user}; "
        "GRANT USAGE{create} ON SCHEMA {tschema} TO {user}"
    ).format(
        ctl=sql.Identifier(config.control_schema),
        user=user,
        rights=rights,
        target=target,
        create=sql.SQL(", CREATE" if config.create_table else ""),
        tschema=sql.Identifier(schema or "public"),
    )
    return (
        f"As an administrator, grant the writer what it needs: {grants.as_string(None)} "
        "(UPDATE only for upserts, CREATE only with create_table=True; see the connector's docs on grants)."
    )


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
