"""What a PostgreSQL writer must be granted, as data: the docs' table, the error's fix and the tests read it.

:func:`writer_grants` lists the least privilege for one sink configuration; each :class:`Grant`
is a statement an administrator runs (identifiers quoted by :mod:`psycopg.sql`) and the
privilege function that tells whether it is held. :func:`missing_grants` asks the server which
are missing, which ``setup`` does before anything is written, so a writer short of a grant stops
with a :class:`~eosink.errors.PermissionDeniedError` that names it. ``docs/connectors/postgres.md``
shows :func:`grants_table`; a unit test keeps the two equal, and the secured tests grant exactly
these, then take each away in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from eosink.connectors.postgres.config import PostgresConfig

__all__ = ["Grant", "documented_grants", "grants_table", "missing_grants", "writer_grants"]


@dataclass(frozen=True)
class Grant:
    """One privilege the writer needs."""

    name: str
    """A short, stable name (``target-insert``): what tests and errors call it."""
    permission: str
    """The privilege as an administrator says it (``INSERT on "public"."payments"``)."""
    why: str
    """What the sink does with it."""
    on: tuple[str, str]
    """The object it is on, as the server names it in a refusal: ``("table", "payments")``."""
    when: str
    """Which configurations need it (``always``, ``mode="upsert"``, ...)."""
    statement: sql.Composed
    """The SQL that grants it (run by an administrator; the writer role already exists)."""
    held: sql.SQL | sql.Composed
    """A boolean query: whether the current user holds it."""

    def sql_text(self, conn: psycopg.Connection[Any] | None = None) -> str:
        """:attr:`statement` as text (quoted by psycopg)."""
        return self.statement.as_string(conn)


def writer_grants(config: PostgresConfig, role: str, database: str) -> list[Grant]:
    """The least privilege for a writer ``role`` of ``config`` in ``database``.

    The writer owns its control schema; on the target it reads and inserts (and updates, for
    upserts); with ``create_table=True`` it creates the target in the target's schema, then owns it.
    """
    who = sql.Identifier(role)
    schema_name, table = config.target
    tschema = schema_name or "public"
    target = sql.Identifier(tschema, table)
    ctl = sql.Identifier(config.control_schema)
    db = sql.Identifier(database)
    shown = f"{sql.Identifier(tschema).as_string(None)}.{sql.Identifier(table).as_string(None)}"
    grants = [
        Grant(
            "connect",
            f"CONNECT on database {db.as_string(None)}",
            "every connection (granted to PUBLIC by default; a locked-down database revokes that)",
            ("database", database),
            "always",
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, who),
            sql.SQL("SELECT has_database_privilege(current_database(), 'CONNECT')"),
        ),
        Grant(
            "control-schema",
            f"the control schema {ctl.as_string(None)}, owned by the writer (or CREATE on the database to make it)",
            "epochs, committables, bundles and staged rows of every batch (created by the writer at setup)",
            ("schema", config.control_schema),
            "always",
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {} AUTHORIZATION {}").format(ctl, who),
            sql.SQL(
                "SELECT CASE WHEN NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = {n}) "
                "THEN has_database_privilege(current_database(), 'CREATE') "
                "ELSE has_schema_privilege({n}, 'USAGE') AND has_schema_privilege({n}, 'CREATE') END"
            ).format(n=sql.Literal(config.control_schema)),
        ),
        Grant(
            "target-schema-usage",
            f"USAGE on schema {sql.Identifier(tschema).as_string(None)}",
            "finding the target table",
            ("schema", tschema),
            "always",
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(tschema), who),
            sql.SQL("SELECT has_schema_privilege({}, 'USAGE')").format(sql.Literal(tschema)),
        ),
    ]
    if config.create_table:
        grants.append(
            Grant(
                "target-schema-create",
                f"CREATE on schema {sql.Identifier(tschema).as_string(None)}",
                "creating the target from the first batch's schema (the writer then owns it)",
                ("schema", tschema),
                "create_table=True",
                sql.SQL("GRANT CREATE ON SCHEMA {} TO {}").format(sql.Identifier(tschema), who),
                sql.SQL("SELECT has_schema_privilege({}, 'CREATE')").format(sql.Literal(tschema)),
            )
        )
        return grants
    rights = [("INSERT", "moving a batch's rows in at commit", "create_table=False")]
    if config.mode == "upsert":
        upsert = 'mode="upsert", create_table=False'
        rights.append(("UPDATE", "replacing rows whose key is already there", upsert))
        rights.append(("SELECT", "finding the rows a key conflicts with (INSERT .. ON CONFLICT DO UPDATE)", upsert))
    for right, why, when in rights:
        grants.append(
            Grant(
                f"target-{right.lower()}",
                f"{right} on {shown}",
                why,
                ("table", table),
                when,
                sql.SQL("GRANT {} ON {} TO {}").format(sql.SQL(right), target, who),
                sql.SQL(
                    "SELECT coalesce((SELECT has_table_privilege(c.oid, {r}) FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = {s} AND c.relname = {t}), true)"
                ).format(r=sql.Literal(right), s=sql.Literal(tschema), t=sql.Literal(table)),
            )
        )
    return grants


def missing_grants(conn: psycopg.Connection[Any], grants: list[Grant]) -> list[Grant]:
    """The grants the connection's user does not hold (a target that does not exist yet counts as held:
    creating it is the writer's own business, and a missing one is a schema error of its own)."""
    missing = []
    for grant in grants:
        row = conn.execute(grant.held).fetchone()
        if not (row and row[0]):
            missing.append(grant)
    return missing


def documented_grants() -> list[Grant]:
    """Every grant of every configuration, for a writer ``writer`` of ``public.payments`` in database ``app``."""
    shapes: list[dict[str, Any]] = [{}, {"mode": "upsert", "key_columns": ("id",)}, {"create_table": True}]
    found: dict[str, Grant] = {}
    for options in shapes:
        config = PostgresConfig("postgresql://writer@db.example/app", table="public.payments", **options)
        for grant in writer_grants(config, "writer", "app"):
            found.setdefault(grant.name, grant)
    return list(found.values())


def grants_table(grants: list[Grant]) -> str:
    """The grants as the Markdown table the connector's page shows."""
    lines = ["| grant | needed | what the sink does with it |", "|---|---|---|"]
    lines += [f"| `{g.sql_text()}` | {g.when} | {g.why} |" for g in grants]
    return "\n".join(lines)
