"""The PostgreSQL connector's bad-input catalogue, driven through the real protocol into the real server.

Each case runs batches through the real Coordinator (a simulated Spark, see ``_badinput``)
until the bad input stops the query, then checks, in this order:

1. the error's class (SchemaError / BadRecordError / ConfigurationError / TransientError),
   that its problem names what is wrong and its fix names what to change;
2. nothing of the failing batch is visible, no bundle was written for it, and no transaction
   is left PREPAREd on the server (batches committed before it stay, once);
3. no password appears in the error's text, repr or traceback;
4. after the fix, a restart (a new sink and a new Coordinator on the same checkpoint and
   app_id) resumes, and the target holds exactly every batch's rows, each batch with its
   bundle, with nothing in doubt (``sink.recover(app_id) == []``) and no manifest left.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from eosink.connectors.postgres import PostgresConfig
from eosink.connectors.postgres.testing import PostgresHarness
from eosink.contracts._mini import SCHEMA, VARIANTS, MemoryBatch, Variant, make_rows
from eosink.errors import (
    AuthenticationError,
    BadRecordError,
    ConfigurationError,
    EosinkError,
    PermissionDeniedError,
    SchemaError,
    TransientError,
)
from eosink.services._process import free_port
from eosink.services.postgres import PostgresEndpoint
from eosink.strategies import Idempotent
from tests.connectors.postgres._badinput import (
    ArrowBatch,
    Driver,
    PrivatePostgres,
    SinkState,
    assert_refused,
    canon,
)

HARNESS = PostgresHarness()
COLUMNS = SCHEMA.names
BY_ID = {v.id: v for v in VARIANTS}
TWO_PC, TXID, IDEMPOTENT_ID = BY_ID["2pc"], BY_ID["txid-check"], BY_ID["idempotent-id"]
TRANSACTIONAL = [pytest.param(v, id=v.id) for v in (TWO_PC, TXID)]
STANDARD = "id bigint, name text, amount double precision, tag text"


@dataclass
class Case:
    """One test's target (on the shared server unless ``url`` says otherwise) and its admin."""

    url: str
    table: tuple[str, str]
    ctl: str

    @property
    def target(self) -> SinkState:
        return SinkState(self.url, self.table, self.ctl)

    def config(self, conninfo: str | None = None, **options: Any) -> PostgresConfig:
        return PostgresConfig(conninfo or self.url, table=self.table, control_schema=self.ctl, **options)

    def admin(self, statement: str, *args: Any) -> None:
        """Run DDL as the superuser; ``{t}`` is the target table (quoted)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL(statement).format(t=sql.Identifier(*self.table)), args or None)


@pytest.fixture
def case(postgres_endpoint: PostgresEndpoint) -> Iterator[Case]:
    """A fresh target table and control schema on the shared server; both dropped afterwards."""
    tag = uuid.uuid4().hex[:10]
    made = Case(postgres_endpoint.url, ("public", f"bi_{tag}"), f"bi_{tag}_ctl")
    yield made
    HARNESS.drop(made.ctl, [sql.Identifier(*made.table)])


def batches(
    n: int = 3, *, duplicate: bool = True, changes: dict[str, dict[str, Any]] | None = None
) -> list[MemoryBatch]:
    """``n`` batches of the contract rows (3 participants each); ``changes`` maps ``"b<batch>r<row>"``
    to values that replace those of that row (the bad input)."""
    out = []
    for b in range(n):
        rows = make_rows(b, duplicate=duplicate)
        for where, values in (changes or {}).items():
            batch_id, row = (int(x) for x in where[1:].split("r"))
            if batch_id == b:
                rows[row] = {**rows[row], **values}
        out.append(MemoryBatch(rows))
    return out


def resume(driver: Driver, case: Case, data: list[MemoryBatch], config: PostgresConfig | None = None) -> None:
    """(4): a restart after the fix lands every batch exactly once, nothing in doubt."""
    driver.restart(config)
    try:
        driver.run(data)
    finally:
        driver.close()
    case.target.exactly(driver, data, COLUMNS)


# -- schema mismatch: the target does not fit the batch --------------------------------------------------

SCHEMA_CASES = [
    pytest.param(
        "id bigint, name text, amount double precision",
        SchemaError,
        ["'tag'", "not in table"],
        ["ADD COLUMN"],
        "ALTER TABLE {t} ADD COLUMN tag text",
        id="missing-column",
    ),
    pytest.param(
        "id bigint, name text, amount boolean, tag text",
        SchemaError,
        ["'amount'", "double", "boolean"],
        ["Cast", "ALTER"],
        "ALTER TABLE {t} ALTER COLUMN amount TYPE double precision USING NULL",
        id="incompatible-type",
    ),
    pytest.param(  # a string into a type Spark has its own type for: a forgotten cast, found before any row
        "id bigint, name integer, amount double precision, tag text",
        SchemaError,
        ["'name'", "the stream's type string", "of type INTEGER"],
        ["col('name').cast('int')", "ALTER"],
        "ALTER TABLE {t} ALTER COLUMN name TYPE text",
        id="text-into-integer-column",
    ),
    pytest.param(  # text is uuid's input format: the server parses each value and refuses the bad one
        "id bigint, name uuid, amount double precision, tag text",
        BadRecordError,
        ['invalid input syntax for type uuid: "', "column name"],
        [],
        "ALTER TABLE {t} ALTER COLUMN name TYPE text",
        id="text-into-uuid-column",
    ),
    pytest.param(
        "id bigint, name text, amount double precision, tag text NOT NULL",
        SchemaError,
        ["'tag'", "null values", "NOT NULL"],
        ["DROP NOT NULL"],
        "ALTER TABLE {t} ALTER COLUMN tag DROP NOT NULL",
        id="null-into-not-null",
    ),
    pytest.param(
        STANDARD + ", region text NOT NULL",
        SchemaError,
        ["'region'", "NOT NULL without a default", "lacks it"],
        ["default"],
        "ALTER TABLE {t} ALTER COLUMN region SET DEFAULT 'eu'",
        id="not-null-column-missing-from-batch",
    ),
]


@pytest.mark.parametrize("variant", TRANSACTIONAL)
@pytest.mark.parametrize(("columns", "error", "problem", "fix", "fix_sql"), SCHEMA_CASES)
def test_schema_mismatch(
    tmp_path: Path,
    case: Case,
    variant: Variant,
    columns: str,
    error: type[EosinkError],
    problem: list[str],
    fix: list[str],
    fix_sql: str,
) -> None:
    """A target whose columns do not fit the batch stops batch 0 before anything of it is visible;
    after ALTER TABLE the restarted query writes every batch once."""
    case.admin("CREATE TABLE {t} (" + columns + ")")
    data = batches()
    driver = Driver(tmp_path, variant, case.config())
    err = driver.fail(data, error)
    assert_refused(err, problem=problem, fix=fix, secrets=[PostgresEndpoint.from_url(case.url).password])
    case.target.nothing_of([], COLUMNS)
    case.admin(fix_sql)
    resume(driver, case, data)
    if "region" in columns:
        assert {r["region"] for r in case.target.rows()} == {"eu"}


# -- bad values: the target's types are narrower than a value of batch 1 ------------------------------------

DATA_CASES = [
    pytest.param(
        "id integer, name text, amount double precision, tag text",
        {"id": 3_000_000_000},
        ["out of range for type integer", "column id"],
        "ALTER TABLE {t} ALTER COLUMN id TYPE bigint",
        id="integer-overflow",
    ),
    pytest.param(
        "id bigint, name text, amount numeric(5,2), tag text",
        {"amount": 12345.5},
        ["numeric field overflow", "column amount"],
        "ALTER TABLE {t} ALTER COLUMN amount TYPE double precision",
        id="numeric-overflow",
    ),
    pytest.param(
        "id bigint, name varchar(6), amount double precision, tag text",
        {"name": "much too long for six characters"},
        ["value too long for type character varying(6)", "column name"],
        "ALTER TABLE {t} ALTER COLUMN name TYPE varchar(64)",
        id="oversized-value",
    ),
]


@pytest.mark.parametrize("variant", TRANSACTIONAL)
@pytest.mark.parametrize(("columns", "bad", "problem", "fix_sql"), DATA_CASES)
def test_value_the_column_cannot_hold(
    tmp_path: Path, case: Case, variant: Variant, columns: str, bad: dict[str, Any], problem: list[str], fix_sql: str
) -> None:
    """One value of batch 1 (in the last participant's share, after the others prepared) does not fit
    its column: BadRecordError, the other participants' work is rolled back, batch 0 stays once; after
    widening the column the restart writes batch 1 and 2 once."""
    case.admin("CREATE TABLE {t} (" + columns + ")")
    data = batches(changes={"b1r8": bad})
    driver = Driver(tmp_path, variant, case.config())
    err = driver.fail(data, BadRecordError)
    assert_refused(err, problem=problem, fix=["rows"], secrets=[PostgresEndpoint.from_url(case.url).password])
    case.target.nothing_of(data[:1], COLUMNS)
    case.admin(fix_sql)
    resume(driver, case, data)


# -- null keys under upsert and the idempotent strategy -------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "row"),
    [
        pytest.param(TWO_PC, 8, id="2pc-upsert-config"),
        pytest.param(TXID, 8, id="txid-check-upsert-config"),
        pytest.param(IDEMPOTENT_ID, 0, id="idempotent-id-first-participant"),
        pytest.param(IDEMPOTENT_ID, 8, id="idempotent-id-last-participant"),
    ],
)
def test_null_key(tmp_path: Path, case: Case, variant: Variant, row: int) -> None:
    """A null in the upsert key (the sink's key_columns, or the idempotent strategy's) is a BadRecordError
    naming the key. Transactional strategies show nothing of the batch; the idempotent strategy commits
    per participant, so shares written before the bad one may stay visible (documented in
    eosink.errors) until the replay overwrites them. Fixing the data and restarting lands every row once."""
    options: dict[str, Any] = {"create_table": True}
    if variant.transactional:
        options.update(mode="upsert", key_columns=("id",))
    data = batches(duplicate=False, changes={f"b1r{row}": {"id": None}})
    driver = Driver(tmp_path, variant, case.config(**options))
    err = driver.fail(data, BadRecordError)
    assert_refused(err, problem=["null", "'id'"], fix=["'id'"], secrets=[PostgresEndpoint.from_url(case.url).password])
    if variant.transactional or row == 0:
        case.target.nothing_of(data[:1], COLUMNS)
    else:
        seen = case.target.visible(COLUMNS) - canon(data[0].rows, COLUMNS)
        assert seen <= canon(data[1].rows, COLUMNS) and sum(seen.values()) < len(data[1].rows)
        assert case.target.bundles() == [0]
    fixed = batches(duplicate=False, changes={f"b1r{row}": {"id": 199}})
    resume(driver, case, fixed)


# -- hostile names ---------------------------------------------------------------------------------------------

HOSTILE_KEY = 'ke"y.; --'


@dataclass
class Hostile:
    """A target whose schema, table, control schema and columns are named to break naive SQL."""

    case: Case
    columns: list[str]
    data: list[MemoryBatch]
    decoy: str
    inject: str


@pytest.fixture
def hostile(postgres_endpoint: PostgresEndpoint) -> Iterator[Hostile]:
    """The target exists but lacks the column named ``"; DROP TABLE decoy_...; --``; the decoy table
    is what that text would drop if it were ever executed as SQL. Everything is dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    decoy = f"decoy_{tag}"
    inject = f'"; DROP TABLE {decoy}; --'
    schema, table, ctl = f'sch"ema.{tag}; ü', '"; DROP TABLE x; --', f'ctl "{tag}"; ✓'
    columns = [HOSTILE_KEY, 'we"ird', "a.b", "ünïcödé ✓", "select", inject]
    arrow = pa.schema([(HOSTILE_KEY, pa.int64())] + [(c, pa.string()) for c in columns[1:]])
    data: list[MemoryBatch] = [
        ArrowBatch(
            [{HOSTILE_KEY: b * 100 + i, **{c: f"{c} '\"\\;\n b{b} r{i}" for c in columns[1:]}} for i in range(8)],
            arrow,
        )
        for b in range(3)
    ]
    with psycopg.connect(postgres_endpoint.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE TABLE {} (id int)").format(sql.Identifier(decoy)))
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        admin.execute(
            sql.SQL("CREATE TABLE {} ({})").format(
                sql.Identifier(schema, table),
                sql.SQL(", ").join(
                    sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL("bigint" if c == HOSTILE_KEY else "text"))
                    for c in columns[:-1]
                ),
            )
        )
    try:
        yield Hostile(Case(postgres_endpoint.url, (schema, table), ctl), columns, data, decoy, inject)
    finally:
        HARNESS.drop(ctl, [sql.Identifier(schema, table), sql.Identifier(decoy)])
        with psycopg.connect(postgres_endpoint.url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(TWO_PC, id="2pc"),
        pytest.param(Variant("idempotent-hostile-key", lambda: Idempotent([HOSTILE_KEY]), True), id="idempotent-key"),
    ],
)
def test_hostile_names(tmp_path: Path, hostile: Hostile, variant: Variant) -> None:
    """Quotes, dots, semicolons, unicode and ``"; DROP TABLE x; --`` in schema, table, control schema,
    column and key names are data, never SQL: the SchemaError names the missing column exactly, the
    decoy table survives, and after ADD COLUMN every row lands once."""
    case = hostile.case
    driver = Driver(tmp_path, variant, case.config(create_table=True))
    err = driver.fail(hostile.data, SchemaError)
    assert_refused(
        err,
        problem=[repr(hostile.inject)],
        fix=["ADD COLUMN"],
        secrets=[PostgresEndpoint.from_url(case.url).password],
    )
    case.target.nothing_of([], hostile.columns)
    case.admin("ALTER TABLE {t} ADD COLUMN " + sql.Identifier(hostile.inject).as_string(None) + " text")
    driver.restart()
    try:
        driver.run(hostile.data)
    finally:
        driver.close()
    case.target.exactly(driver, hostile.data, hostile.columns)
    with psycopg.connect(case.url, autocommit=True) as admin:
        assert admin.execute("SELECT to_regclass(%s) IS NOT NULL", (hostile.decoy,)).fetchone() == (True,)


def test_hostile_names_fix_quotes_identifiers(tmp_path: Path, hostile: Hostile) -> None:
    """SQL that an error suggests running must quote identifiers as PostgreSQL does."""
    case = hostile.case
    driver = Driver(tmp_path, TWO_PC, case.config())
    try:
        err = driver.fail(hostile.data, SchemaError)
    finally:
        driver.close()
    quoted = sql.Identifier(*case.table).as_string(None)
    assert err.fix is not None and f"ALTER TABLE {quoted}" in err.fix


# -- the target is missing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", TRANSACTIONAL)
def test_missing_table_without_create_table(tmp_path: Path, case: Case, variant: Variant) -> None:
    """create_table=False and no target: SchemaError naming the table and create_table; after CREATE TABLE
    the restart writes every batch once."""
    data = batches()
    driver = Driver(tmp_path, variant, case.config(create_table=False))
    err = driver.fail(data, SchemaError)
    assert_refused(
        err,
        problem=[case.table[1], "does not exist"],
        fix=["create_table=True"],
        secrets=[PostgresEndpoint.from_url(case.url).password],
    )
    case.target.nothing_of([], COLUMNS)
    case.admin("CREATE TABLE {t} (" + STANDARD + ")")
    resume(driver, case, data)


# -- connection problems: credentials and addresses change between two batches --------------------------------


def _wrong_password(case: Case) -> tuple[PostgresConfig, str]:
    wrong = "wrong-" + secrets.token_urlsafe(12)
    return case.config(make_conninfo(case.url, password=wrong)), wrong


def _after_first_batch(tmp_path: Path, case: Case, variant: Variant, data: list[MemoryBatch]) -> Driver:
    """Batch 0 committed by a working driver, which then dies."""
    case.admin("CREATE TABLE {t} (" + STANDARD + ")")
    driver = Driver(tmp_path, variant, case.config())
    driver.run(data[:1])
    return driver


def test_wrong_password(tmp_path: Path, case: Case) -> None:
    """The driver restarts with a wrong password: the query stops at start, the error says authentication
    failed without showing either password; nothing of batch 1 lands; with the right password the restart
    writes batch 1 and 2 once. (The error's class is checked by the next test.)"""
    data = batches()
    driver = _after_first_batch(tmp_path, case, TWO_PC, data)
    bad, wrong = _wrong_password(case)
    driver.restart(bad)
    with pytest.raises(EosinkError) as info:
        driver.run(data)
    assert_refused(
        info.value,
        problem=["password authentication failed"],
        fix=[],
        secrets=[wrong, PostgresEndpoint.from_url(case.url).password],
    )
    case.target.nothing_of(data[:1], COLUMNS)
    resume(driver, case, data, case.config())


def test_wrong_password_is_an_authentication_error(tmp_path: Path, case: Case) -> None:
    """A wrong password is not transient (retrying cannot help): AuthenticationError whose fix names the
    password / credentials of the conninfo."""
    bad, wrong = _wrong_password(case)
    driver = Driver(tmp_path, TWO_PC, bad)
    err = driver.fail(batches(1), AuthenticationError)
    assert_refused(
        err,
        problem=["password authentication failed"],
        fix=["password"],
        secrets=[wrong, PostgresEndpoint.from_url(case.url).password],
    )


@pytest.mark.parametrize("variant", TRANSACTIONAL)
def test_unreachable_server(tmp_path: Path, case: Case, variant: Variant) -> None:
    """The driver restarts pointing at a closed port: TransientError naming the address and telling to
    check the server; nothing of batch 1 lands; at the right address the restart writes batch 1 and 2 once."""
    data = batches()
    driver = _after_first_batch(tmp_path, case, variant, data)
    port = free_port()  # nothing listens there
    driver.restart(case.config().with_address("127.0.0.1", port))
    err = driver.fail(data, TransientError)
    assert_refused(
        err,
        problem=[f"port {port}", "Connection refused"],
        fix=["reachable"],
        secrets=[PostgresEndpoint.from_url(case.url).password],
    )
    case.target.nothing_of(data[:1], COLUMNS)
    resume(driver, case, data, case.config())


# -- permission denied: a role without the rights it needs -----------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "granted", "fix_grants"),
    [
        pytest.param(TWO_PC, [], ["GRANT CREATE ON DATABASE {db} TO {r}", "GRANT SELECT, INSERT ON {t} TO {r}"]),
        pytest.param(TWO_PC, ["GRANT CREATE ON DATABASE {db} TO {r}", "GRANT SELECT ON {t} TO {r}"], None),
        pytest.param(TXID, ["GRANT CREATE ON DATABASE {db} TO {r}", "GRANT SELECT ON {t} TO {r}"], None),
    ],
    ids=["2pc-no-rights", "2pc-no-insert-on-target", "txid-check-no-insert-on-target"],
)
def test_permission_denied(
    tmp_path: Path, case: Case, variant: Variant, granted: list[str], fix_grants: list[str] | None
) -> None:
    """A login role without rights (none at all, or no INSERT on the target): the sink's check of its grants
    at setup stops the query with PermissionDeniedError giving the GRANT statements, without the role's
    password; nothing visible, no bundle, nothing left prepared; after the GRANT the restart writes every
    batch once. (The server's own refusal at commit, with that check off: tests/secured.)"""
    role, password = f"bi_role_{uuid.uuid4().hex[:8]}", secrets.token_urlsafe(16)
    endpoint = PostgresEndpoint.from_url(case.url)
    names = {"db": sql.Identifier(endpoint.dbname), "r": sql.Identifier(role), "t": sql.Identifier(*case.table)}

    def grant(statements: list[str]) -> None:
        with psycopg.connect(case.url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(sql.SQL(statement).format(**names))

    case.admin("CREATE TABLE {t} (" + STANDARD + ")")
    with psycopg.connect(case.url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(names["r"], sql.Literal(password)))
    try:
        grant(granted)
        data = batches()
        config = case.config(make_conninfo(case.url, user=role, password=password))
        driver = Driver(tmp_path, variant, config)
        err = driver.fail(data, PermissionDeniedError)
        assert_refused(
            err,
            problem=["lacks what the sink needs", "INSERT"],
            fix=["GRANT INSERT ON", case.table[-1]],
            secrets=[password, endpoint.password],
        )
        case.target.nothing_of([], COLUMNS)
        grant(fix_grants or ["GRANT INSERT ON {t} TO {r}"])
        resume(driver, case, data)
    finally:
        HARNESS.drop(case.ctl, [sql.Identifier(*case.table)])
        with psycopg.connect(case.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(names["r"]))
            conn.execute(sql.SQL("DROP ROLE {}").format(names["r"]))


# -- max_prepared_transactions: a private server we may restart ---------------------------------------------


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A second PostgreSQL (the shared one is never restarted), stopped and removed after the module."""
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.destroy()


@pytest.mark.parametrize(
    ("setting", "problem", "fix"),
    [
        pytest.param(
            0,
            ["max_prepared_transactions = 0", "PREPARE TRANSACTION is disabled"],
            ["max_prepared_transactions", "restart the server"],
            id="zero",
        ),
        pytest.param(
            1,
            ["max_prepared_transactions = 1 is too few", "needs one more"],
            ["Raise max_prepared_transactions to at least 4", "txid-check"],
            id="too-low",
        ),
    ],
)
def test_max_prepared_transactions(
    tmp_path: Path, private_postgres: PrivatePostgres, setting: int, problem: list[str], fix: list[str]
) -> None:
    """A server with max_prepared_transactions 0 (PREPARE disabled: refused before any write) or 1 (three
    2pc participants cannot all PREPARE: the second gets SQLSTATE 53200): ConfigurationError naming the
    setting and the value needed; the first participant's prepared work is rolled back, nothing is
    visible. txid-check, which prepares nothing, writes on the same server. After raising the setting
    and restarting the server, the restarted 2pc query writes every batch once."""
    private_postgres.start(setting)
    data = batches()
    tag = uuid.uuid4().hex[:10]
    case = Case(private_postgres.url, ("public", f"mpt_{tag}"), f"mpt_{tag}_ctl")
    driver = Driver(tmp_path / "2pc", TWO_PC, case.config(create_table=True))
    err = driver.fail(data, ConfigurationError)
    assert_refused(err, problem=problem, fix=fix, secrets=[private_postgres.password])
    case.target.nothing_of([], COLUMNS)

    other = Case(private_postgres.url, ("public", f"mpt_{tag}_txid"), f"mpt_{tag}_txid_ctl")
    txid = Driver(tmp_path / "txid", TXID, other.config(create_table=True))
    try:
        txid.run(data)
    finally:
        txid.close()
    other.target.exactly(txid, data, COLUMNS)

    private_postgres.start(8)
    resume(driver, case, data)


def test_prepared_disabled_message_names_txid_check_as_the_way_out(
    tmp_path: Path, private_postgres: PrivatePostgres
) -> None:
    """The max_prepared_transactions = 0 error must not blame txid-check, and should offer it as an alternative."""
    private_postgres.start(0)
    tag = uuid.uuid4().hex[:10]
    case = Case(private_postgres.url, ("public", f"mpt_{tag}"), f"mpt_{tag}_ctl")
    driver = Driver(tmp_path, TWO_PC, case.config(create_table=True))
    try:
        err = driver.fail(batches(1), ConfigurationError)
    finally:
        driver.close()
    assert "txid-check" not in err.problem
    assert err.fix is not None and "txid-check" in err.fix
