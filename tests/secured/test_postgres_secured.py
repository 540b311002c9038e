"""PostgreSQL secured: TLS only (``verify-full``), scram-sha-256, and a writer holding only the documented grants.

Against ``eosink services up postgres-secure`` (:mod:`eosink.services.postgres_secure`):

* the contract suite's cases that need no fault proxy, as the least-privileged writer;
* each documented grant (:func:`eosink.connectors.postgres.grants.writer_grants`) taken away in
  turn: the query stops with a :class:`PermissionDeniedError` naming it, nothing is visible;
  the server's own refusal is proven too (the sink's check before writing switched off);
  granted again, a restart lands every row once;
* wrong credentials, an untrusted certificate, a host name mismatch and TLS off: each a typed
  error, with the password nowhere in the error, the logs or the output;
* ``eosink status`` and ``eosink recover`` as the writer.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres.grants import writer_grants
from eosink.connectors.postgres.testing import SecurePostgresHarness
from eosink.contracts import contract_tests
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, make_rows
from eosink.contracts.secrets import assert_secret_free
from eosink.errors import AuthenticationError, EosinkError, PermissionDeniedError, TlsError
from eosink.services import get_service
from eosink.services._tls import TestCA
from eosink.services.postgres_secure import SecurePostgresEndpoint, secure_url

from ._operations import leave_in_doubt, status_and_recover

HARNESS = SecurePostgresHarness()
TestSecurePostgresContract = contract_tests(HARNESS, name="TestSecurePostgresContract")

APP = "app_secured"
COLUMNS = ("id", "name", "amount", "tag")
VARIANT = {v.id: v for v in VARIANTS}


@pytest.fixture(scope="module")
def endpoint() -> SecurePostgresEndpoint:
    found = get_service("postgres-secure").endpoint()  # ServiceError (not a skip) when it is not running
    assert isinstance(found, SecurePostgresEndpoint)
    return found


@dataclass
class Writer:
    """A role of its own, with a password, and a target in a schema of its own (nothing granted yet)."""

    endpoint: SecurePostgresEndpoint
    role: str
    password: str
    schema: str
    table: str
    ctl: str

    def config(self, **options: Any) -> PostgresConfig:
        url = secure_url(self.role, self.password, self.endpoint.port, self.endpoint.ca)
        return PostgresConfig(url, table=(self.schema, self.table), control_schema=self.ctl, **options)

    def grant(self, config: PostgresConfig, *, leave_out: str | None = None) -> None:
        admin = HARNESS.admin()
        for grant in writer_grants(config, self.role, self.endpoint.dbname):
            if grant.name != leave_out:
                admin.execute(grant.statement)

    def rows(self) -> list[dict[str, Any]]:
        return HARNESS.read_rows(self.schema, self.table)


@pytest.fixture
def writer(endpoint: SecurePostgresEndpoint) -> Iterator[Writer]:
    tag = uuid.uuid4().hex[:8]
    made = Writer(endpoint, f"w_{tag}", uuid.uuid4().hex, f"s_{tag}", f"t_{tag}", f"c_{tag}")
    admin = HARNESS.admin()
    admin.execute(
        sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(made.role), sql.Literal(made.password))
    )
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(made.schema)))
    yield made
    HARNESS.drop(made.ctl, [])
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(made.schema)))
    admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(made.role)))
    admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(made.role)))


def _target(writer: Writer, keyed: bool) -> None:
    key = " PRIMARY KEY" if keyed else ""
    HARNESS.admin().execute(
        sql.SQL(f"CREATE TABLE {{}} (id bigint{key}, name text, amount float8, tag text)").format(
            sql.Identifier(writer.schema, writer.table)
        )
    )


def _batches(keyed: bool) -> list[MemoryBatch]:
    """Two batches; keyed, the second one rewrites three keys of the first (an upsert must update them)."""
    if not keyed:
        return [MemoryBatch(make_rows(b), participants=2) for b in range(2)]
    first = make_rows(0, duplicate=False)
    second = make_rows(1, duplicate=False) + [{**r, "name": f"{r['name']}-v2"} for r in first[:3]]
    return [MemoryBatch(first, participants=2), MemoryBatch(second, participants=2)]


def _canon(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in rows)


def _expected(batches: list[MemoryBatch], keyed: bool) -> list[tuple[Any, ...]]:
    rows = [r for b in batches for r in b.rows]
    return _canon(list({r["id"]: r for r in rows}.values()) if keyed else rows)


class NoCheck(PostgresSink):
    """The sink without its grants check before writing: what the server itself refuses."""

    def _check_grants(self) -> None:
        pass


# (options, strategy) of each configuration whose grants are walked
SHAPES = {
    "append": ({}, "2pc"),
    "upsert": ({"mode": "upsert", "key_columns": ("id",)}, "idempotent-id"),
    "create_table": ({"create_table": True}, "txid-check"),
}
WALK = [
    (shape, grant.name)
    for shape, (options, _) in SHAPES.items()
    for grant in writer_grants(PostgresConfig("postgresql://x@h/db", table=("s", "t"), **options), "w", "db")
]


@pytest.mark.parametrize(("shape", "left_out"), WALK)
def test_each_documented_grant_is_needed(writer: Writer, tmp_path: Path, shape: str, left_out: str) -> None:
    """Without ``left_out`` the query stops with PermissionDeniedError naming it, before anything is visible, both
    at the sink's own check and at the server's refusal; granted again, a restart lands every batch once."""
    options, strategy = SHAPES[shape]
    keyed = shape == "upsert"
    if shape != "create_table":
        _target(writer, keyed)
    config = writer.config(**options)
    (grant,) = [g for g in writer_grants(config, writer.role, writer.endpoint.dbname) if g.name == left_out]
    writer.grant(config, leave_out=left_out)
    batches = _batches(keyed)

    driver = SparkOrderDriver(tmp_path / "checked", VARIANT[strategy], config, PostgresSink, APP)
    try:
        err = driver.fail(batches, PermissionDeniedError)
        assert isinstance(err, PermissionDeniedError) and err.permission == grant.permission, err
        assert err.fix and grant.sql_text() in err.fix
        assert_secret_free(err, [writer.password])
        assert writer.rows() == []

        # The server's own refusal, without the sink's check (another app_id: its own batches).
        refused = SparkOrderDriver(tmp_path / "server", VARIANT[strategy], config, NoCheck, f"{APP}_unchecked")
        try:
            err = refused.fail(batches, PermissionDeniedError)
        finally:
            refused.close()
        assert isinstance(err, PermissionDeniedError) and err.permission and grant.permission in err.permission
        if VARIANT[strategy].transactional:
            assert writer.rows() == []
        else:  # idempotent: rows upserted before the refusal stay (the replay rewrites them), none of them wrong
            assert set(_canon(writer.rows())) <= set(_canon([r for b in batches for r in b.rows]))

        HARNESS.admin().execute(grant.statement)
        driver.restart()
        driver.run(batches)
    finally:
        driver.close()
    assert _canon(writer.rows()) == _expected(batches, keyed)


def test_the_documented_grants_are_enough_for_every_strategy(writer: Writer, tmp_path: Path) -> None:
    """With exactly its grants, the writer runs each strategy's batches into one table, each batch once."""
    _target(writer, keyed=True)
    config = writer.config(mode="upsert", key_columns=("id",))
    writer.grant(config)
    expected: list[dict[str, Any]] = []
    for n, strategy in enumerate(["2pc", "txid-check", "idempotent-id"]):
        batches = [MemoryBatch(make_rows(10 * n + b, duplicate=False), participants=2) for b in range(2)]
        driver = SparkOrderDriver(tmp_path / strategy, VARIANT[strategy], config, PostgresSink, f"{APP}_{n}")
        try:
            driver.run(batches)
        finally:
            driver.close()
        expected += [r for b in batches for r in b.rows]
    assert _canon(writer.rows()) == _canon(expected)


# -- credentials and TLS ----------------------------------------------------------------------------------------


def _bad_ca(tmp_path: Path) -> str:
    return str(TestCA("an untrusted CA").write_ca(tmp_path / "untrusted.pem"))


BAD = {
    "wrong password": (AuthenticationError, lambda url, tmp: make_conninfo(url, password="not-the-password-42")),
    "untrusted certificate": (TlsError, lambda url, tmp: make_conninfo(url, sslrootcert=_bad_ca(tmp))),
    "host name mismatch": (TlsError, lambda url, tmp: make_conninfo(url, host="other.invalid", hostaddr="127.0.0.1")),
    "TLS off": (TlsError, lambda url, tmp: make_conninfo(url, sslmode="disable")),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_credentials_and_tls_are_typed_errors_without_the_secret(
    writer: Writer, tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    expected, spoil = BAD[case]
    _target(writer, keyed=False)
    good = writer.config()
    writer.grant(good)
    conninfo = spoil(good.conninfo, tmp_path)
    config = PostgresConfig(conninfo, table=(writer.schema, writer.table), control_schema=writer.ctl)
    driver = SparkOrderDriver(tmp_path, VARIANT["2pc"], config, PostgresSink, APP)
    try:
        err = driver.fail(_batches(False), expected)
    finally:
        driver.close()
    assert err.fix
    out, errs = capfd.readouterr()
    secrets = [writer.password, "not-the-password-42"]
    for text in (out, errs, caplog.text, repr(driver.config)):
        assert_secret_free(text, secrets)
    assert_secret_free(err, secrets)
    assert writer.rows() == []


# -- operations as the writer -----------------------------------------------------------------------------------


def test_status_and_recover_as_the_writer(writer: Writer, tmp_path: Path) -> None:
    """A 2pc batch left prepared by a dead driver: ``eosink status`` (as the writer) shows it in doubt, ``eosink
    recover --yes`` commits it (Spark's commit log holds it), then status is clean and the rows are there once."""
    _target(writer, keyed=False)
    config = writer.config()
    writer.grant(config)
    batches = _batches(False)
    driver = SparkOrderDriver(tmp_path, VARIANT["2pc"], config, PostgresSink, APP)
    leave_in_doubt(driver, batches[0])
    where = ["--sink", "postgres", "--table", f"{writer.schema}.{writer.table}", "--control-schema", writer.ctl]
    where += ["--conninfo-env", "EOSINK_TEST_CONNINFO"]
    env = {**os.environ, "EOSINK_TEST_CONNINFO": config.conninfo}
    status_and_recover(where, env, str(driver.ckpt.root), APP, [writer.password])
    assert _canon(writer.rows()) == _canon(batches[0].rows)


def test_secured_server_refuses_plaintext_and_the_writer_holds_nothing_else(endpoint: SecurePostgresEndpoint) -> None:
    """The server itself: no unencrypted connection; the harness's writer is no superuser and cannot create
    databases or roles (so every test above proves the documented grants, not more)."""
    with pytest.raises(EosinkError):
        PostgresSink(PostgresConfig(make_conninfo(endpoint.writer_url(), sslmode="disable"), table="t")).setup(APP)
    row = (
        HARNESS.admin()
        .execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls FROM pg_roles "
            "WHERE rolname = %s",
            (endpoint.writer,),
        )
        .fetchone()
    )
    assert row == {
        "rolsuper": False,
        "rolcreatedb": False,
        "rolcreaterole": False,
        "rolreplication": False,
        "rolbypassrls": False,
    }
