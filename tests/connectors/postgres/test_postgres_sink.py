"""PostgresSink beyond the contract suite: names, schema checks, bad records, secrets, configuration."""

from __future__ import annotations

import pickle
import re
import uuid
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres import sink as sink_module
from eosink.connectors.postgres._control import gid_for, parse_gid
from eosink.connectors.postgres.config import parse_table_name
from eosink.connectors.postgres.testing import PostgresHarness
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.contracts.secrets import assert_secret_free
from eosink.errors import (
    AmbiguousCommitError,
    BadRecordError,
    ConfigurationError,
    FencedError,
    SchemaError,
    TransientError,
)
from eosink.keys import KEY_COLUMN
from eosink.services.postgres import PostgresEndpoint
from eosink.services.proxy import FaultProxy

APP = "app_direct"
HARNESS = PostgresHarness()


def _config(endpoint: PostgresEndpoint, names: dict[str, str], **options: Any) -> PostgresConfig:
    options.setdefault("table", names["table"])
    options.setdefault("create_table", True)
    return PostgresConfig(endpoint.url, control_schema=names["ctl"], **options)


def _write(
    sink: PostgresSink,
    batch_id: int,
    epoch: int,
    data: pa.RecordBatch,
    *,
    keys: tuple[str, ...] | None = None,
    transactional: bool = True,
    participant: int = 0,
) -> Committable:
    task = TaskRef(BatchRef(APP, batch_id), epoch, participant, uuid.uuid4().hex[:16], keys, transactional)
    txn = sink.begin(task)
    sink.write(txn, data)
    return sink.pre_commit(txn)


def _commit(sink: PostgresSink, batch_id: int, epoch: int, committables: list[Committable]) -> Bundle:
    batch = BatchRef(APP, batch_id)
    bundle = Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables), None, "2pc")
    sink.commit(batch, committables, bundle)
    return bundle


def _admin(endpoint: PostgresEndpoint) -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(endpoint.url, autocommit=True)


# -- names -------------------------------------------------------------------------------------------

HOSTILE_COLUMNS = ['we"ird', "with space", "ünïcödé ✓", "select", "Name", "a.b", "drop table x; --"]


def test_hostile_table_and_column_names_round_trip(postgres_endpoint: PostgresEndpoint) -> None:
    """Quotes, dots, spaces, unicode and SQL keywords in schema, table, column and key names are data, never SQL."""
    tag = uuid.uuid4().hex[:6]
    schema, table, ctl = f'sch"ema.{tag} ñ', f'Tab"le {tag}; select', f'ctl "{tag}" ✓'
    with _admin(postgres_endpoint) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        quoted = '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'
        assert parse_table_name(quoted) == (schema, table)
        sink = PostgresSink(PostgresConfig(postgres_endpoint.url, table=quoted, control_schema=ctl, create_table=True))
        arrow = pa.schema([(c, pa.string()) for c in HOSTILE_COLUMNS] + [("id", pa.int64())])
        rows = [{**{c: f"{c} v{i} '\"\\\t\n" for c in HOSTILE_COLUMNS}, "id": i} for i in range(5)]
        epoch = sink.fence(APP)
        c = _write(sink, 0, epoch, pa.RecordBatch.from_pylist(rows, schema=arrow))
        _commit(sink, 0, epoch, [c])
        # upsert by a hostile key column, with a non-transactional task (the idempotent path)
        update = [{**rows[1], "with space": "updated"}, {**rows[4], "with space": "updated"}]
        key = ("drop table x; --",)
        c2 = _write(sink, 1, epoch, pa.RecordBatch.from_pylist(update, schema=arrow), keys=key, transactional=False)
        _commit(sink, 1, epoch, [c2])
        got = sorted(HARNESS.read_rows(schema, table), key=lambda r: r["id"])
        expected = [dict(r) for r in rows]
        expected[1]["with space"] = expected[4]["with space"] = "updated"
        assert got == expected
        assert sink.fetch_last_bundle(APP) is not None
        sink.close()
    finally:
        HARNESS.drop(ctl, [sql.Identifier(schema, table)])
        with _admin(postgres_endpoint) as admin:
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_too_long_names_are_refused(postgres_endpoint: PostgresEndpoint) -> None:
    """PostgreSQL truncates identifiers past 63 bytes: the sink refuses them instead."""
    with pytest.raises(ConfigurationError, match="63 bytes"):
        PostgresConfig(postgres_endpoint.url, table="t" * 64)
    with pytest.raises(ConfigurationError, match="63 bytes"):
        PostgresConfig(postgres_endpoint.url, table="t", control_schema="ü" * 32)


# -- schema checks -------------------------------------------------------------------------------------


def _existing(endpoint: PostgresEndpoint, names: dict[str, str], columns: str) -> None:
    with _admin(endpoint) as admin:
        admin.execute(sql.SQL("CREATE TABLE {} (" + columns + ")").format(sql.Identifier(names["table"])))


BATCH = pa.RecordBatch.from_pylist(
    [{"id": 1, "name": "a", "amount": 1.5, "tag": None}, {"id": 2, "name": "b", "amount": 2.5, "tag": "x"}],
    schema=pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("tag", pa.string())]),
)


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ("id bigint, name text, amount double precision", "'tag' of the batch is not in table"),
        ("id bigint, name text, amount boolean, tag text", "the stream's type double cannot be written"),
        ("id bigint, name bigint, amount float8, tag text", r"string cannot .* type BIGINT.*col\('name'\).cast"),
        ("id bigint, name text, amount float8, tag text NOT NULL", "'tag' has null values"),
        ("id bigint, name text, amount float8, tag text, extra int NOT NULL", "'extra' .* NOT NULL without a default"),
        ('id bigint, name text, amount float8, "Tag" text', "names are case-sensitive"),
    ],
    ids=["missing-column", "incompatible-type", "text-into-bigint", "not-null-violation", "required-column", "case"],
)
def test_schema_errors_before_anything_is_visible(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str], columns: str, match: str
) -> None:
    """A batch that does not fit the table raises SchemaError naming the column and the fix; nothing is visible."""
    _existing(postgres_endpoint, names, columns)
    sink = PostgresSink(_config(postgres_endpoint, names, create_table=False))
    epoch = sink.fence(APP)
    with pytest.raises(SchemaError, match=match) as info:
        _write(sink, 0, epoch, BATCH)
    assert info.value.fix
    assert HARNESS.read_rows(None, names["table"]) == []
    assert sink.recover(APP) == []
    sink.close()


def test_missing_table_without_create_table(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    sink = PostgresSink(_config(postgres_endpoint, names, create_table=False))
    with pytest.raises(SchemaError, match="does not exist"):
        _write(sink, 0, sink.fence(APP), BATCH)


def test_upsert_needs_a_unique_index_unless_create_table(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """Without create_table the sink never adds an index: it says which one to create."""
    _existing(postgres_endpoint, names, "id bigint, name text, amount float8, tag text")
    sink = PostgresSink(_config(postgres_endpoint, names, create_table=False, mode="upsert", key_columns=["id"]))
    with pytest.raises(SchemaError, match="CREATE UNIQUE INDEX"):
        _write(sink, 0, sink.fence(APP), BATCH)
    with _admin(postgres_endpoint) as admin:
        admin.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (id)").format(sql.Identifier(names["table"])))
    epoch = sink.fence(APP)
    _commit(sink, 0, epoch, [_write(sink, 0, epoch, BATCH)])
    _commit(sink, 1, epoch, [_write(sink, 1, epoch, BATCH)])  # mode='upsert': the same ids replace
    assert len(HARNESS.read_rows(None, names["table"])) == 2


def test_null_key_is_a_bad_record(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    """A null in an upsert key raises BadRecordError before anything is written."""
    sink = PostgresSink(_config(postgres_endpoint, names))
    rows = BATCH.to_pylist()
    rows[1]["id"] = None
    with pytest.raises(BadRecordError, match="null in key column 'id'"):
        _write(sink, 0, sink.fence(APP), pa.RecordBatch.from_pylist(rows, schema=BATCH.schema), keys=("id",))
    assert HARNESS.read_rows(None, names["table"]) == []


def test_value_refused_by_the_server_is_a_bad_record(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """A value the column's input function rejects fails the write with BadRecordError; nothing is prepared.

    Pass also: the message names the target table, never the staging table the rows were copied into."""
    _existing(postgres_endpoint, names, "id smallint, name text, amount float8, tag uuid")
    sink = PostgresSink(_config(postgres_endpoint, names))
    rows = BATCH.to_pylist()
    rows[0]["id"] = 1 << 40  # out of smallint's range
    with pytest.raises(BadRecordError, match="out of range"):
        _write(sink, 0, sink.fence(APP), pa.RecordBatch.from_pylist(rows, schema=BATCH.schema))
    with pytest.raises(BadRecordError, match='input syntax for type uuid: "x"') as info:  # text goes into uuid
        _write(sink, 0, sink.fence(APP), BATCH)
    assert names["table"] in str(info.value) and not re.search(r"\b[st]_[0-9a-f]{12,}", str(info.value))
    assert sink.recover(APP) == []


def test_generated_key_column_is_text_with_a_unique_index(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """create_table under generated keys: an ``eosink_key text`` column, unique-indexed for the upsert."""
    sink = PostgresSink(_config(postgres_endpoint, names))
    keyed = BATCH.append_column(KEY_COLUMN, pa.array(["k1", "k2"]))
    epoch = sink.fence(APP)
    c = _write(sink, 0, epoch, keyed, keys=(KEY_COLUMN,), transactional=False)
    assert len(HARNESS.read_rows(None, names["table"])) == 2  # non-transactional: visible at pre_commit
    _commit(sink, 0, epoch, [c])
    with _admin(postgres_endpoint) as admin:
        kind = admin.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
            (names["table"], KEY_COLUMN),
        ).fetchone()
        unique = admin.execute(
            "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass AND indisunique", (names["table"],)
        ).fetchone()
    assert kind == ("text",) and unique == (1,)


def test_rows_of_many_types_round_trip(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    """create_table maps Arrow types to PostgreSQL ones, and the values come back equal."""
    import datetime as dt
    from decimal import Decimal

    utc = dt.timezone.utc
    row = {
        "b": True,
        "i16": 7,
        "i32": -8,
        "u64": (1 << 64) - 1,
        "f32": 1.5,
        "dec": Decimal("12.34"),
        "s": "tab\there, newline\nand backslash \\ and quote '",
        "bin": b"\x00\x01\\x",
        "d": dt.date(2024, 2, 29),
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 678901),
        "tstz": dt.datetime(2024, 1, 2, 3, 4, 5, 1, tzinfo=utc),
        "ints": [1, None, 3],
        "st": {"a": 1, "b": "x"},
    }
    arrow = pa.schema(
        [
            ("b", pa.bool_()),
            ("i16", pa.int16()),
            ("i32", pa.int32()),
            ("u64", pa.uint64()),
            ("f32", pa.float32()),
            ("dec", pa.decimal128(10, 2)),
            ("s", pa.string()),
            ("bin", pa.binary()),
            ("d", pa.date32()),
            ("ts", pa.timestamp("us")),
            ("tstz", pa.timestamp("ns", tz="UTC")),
            ("ints", pa.list_(pa.int64())),
            ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
        ]
    )
    nulls = dict.fromkeys(row)
    sink = PostgresSink(_config(postgres_endpoint, names))
    epoch = sink.fence(APP)
    _commit(sink, 0, epoch, [_write(sink, 0, epoch, pa.RecordBatch.from_pylist([row, nulls], schema=arrow))])
    got = HARNESS.read_rows(None, names["table"])
    assert sorted(got, key=lambda r: r["b"] is None) == [row, nulls]


# -- secrets ---------------------------------------------------------------------------------------------


def test_password_never_in_repr_str_or_errors(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    """repr/str of config and sink hide the password; connection errors do not echo it."""
    password = postgres_endpoint.password
    assert password
    config = _config(postgres_endpoint, names)
    sink = PostgresSink(config)
    for text in (repr(config), str(config), repr(sink), str(sink)):
        assert password not in text and "***" in text
    wrong = "S3cr3t-not-the-password"
    bad_url = postgres_endpoint.url.replace(postgres_endpoint.password, wrong)
    bad = PostgresSink(PostgresConfig(bad_url, table="t", control_schema=names["ctl"]))
    with pytest.raises(ConfigurationError, match="refused the login") as refused:  # a wrong password is no outage
        bad.fetch_last_bundle(APP)
    assert wrong not in str(refused.value) and wrong not in repr(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__
    closed = PostgresSink(config.with_address("127.0.0.1", 1))  # nothing listens on port 1
    with pytest.raises(TransientError) as info:  # an unreachable server is
        closed.fence(APP)
    assert password not in str(info.value)
    with pytest.raises(ConfigurationError) as cfg:
        PostgresConfig(f"postgresql://u:{wrong}@[zz/db", table="t")  # libpq quotes the whole URL in its error
    assert wrong not in str(cfg.value) and cfg.value.__cause__ is None
    assert_secret_free(refused.value, [wrong])  # the whole chain, suppressed context included
    assert_secret_free(info.value, [password])


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p%zzS3cr3t-pw@h/db",  # psycopg: 'invalid percent-encoded token: "<password>"'
        "postgresql://u:S3cr3t-pw@[zz/db",  # libpq quotes the whole URL
        "postgresql+psycopg://u:S3cr3t-pw@h:zz/db",  # SQLAlchemy's parser
        "host=h password='S3cr3t-pw",  # an unterminated quote in a keyword string
    ],
)
def test_a_malformed_conninfo_keeps_no_password_anywhere_in_its_error(url: str) -> None:
    """The parser's error quotes the password: the ConfigurationError must not even keep it as __context__.

    ``raise ... from None`` inside the ``except`` only hid it from the default traceback; error
    trackers and debuggers walk ``__context__``. Pass: a ConfigurationError whose whole chain
    (suppressed links included) is free of the password, plain or URL-encoded.
    """
    with pytest.raises(ConfigurationError) as err:
        PostgresConfig(url, table="t")
    assert_secret_free(err.value, ["S3cr3t-pw", "p%zzS3cr3t-pw"])
    assert err.value.__context__ is None and err.value.__cause__ is None


@pytest.mark.parametrize(
    ("url", "what"),
    [
        ("postgresql://u:pw@h:notaport/db", "port 'notaport'"),
        ("host=h port=0 dbname=d", "port '0'"),
        ("host=h port=65536", "port '65536'"),
        ("postgresql+psycopg://u:pw@h/db?port=x", "port"),
        ("host=a,b,c port=5432,5433", "3 hosts but 2 ports"),
        ("host=h connect_timeout=soon", "connect_timeout"),
        ("host=h sslmode=sometimes", "sslmode 'sometimes'"),
    ],
)
def test_connection_options_libpq_checks_only_at_connect_are_refused_at_construction(url: str, what: str) -> None:
    """A port of 'notaport' used to be accepted, then retried as a TransientError at every connect.

    Pass: ConfigurationError from the constructor naming the option, with a fix; good values pass.
    """
    with pytest.raises(ConfigurationError, match=re.escape(what)) as err:
        PostgresConfig(url, table="t")
    assert err.value.fix
    assert PostgresConfig("host=a,b port=5432,5433 connect_timeout=3 sslmode=verify-full", table="t")


def test_config_forms() -> None:
    """SQLAlchemy URLs lose their driver; keyword strings work; tables parse; bad options are refused."""
    cfg = PostgresConfig("postgresql+psycopg://u:pw@h:5433/db", table="s.t")
    assert cfg.conninfo == "postgresql://u:pw@h:5433/db" and cfg.target == ("s", "t")
    assert "pw" not in repr(cfg)
    assert PostgresConfig("host=h dbname=d password=pw", table=("a.b", 'c"d')).target == ("a.b", 'c"d')
    assert PostgresConfig("host=h", table="Events").target == (None, "Events")
    assert parse_table_name('"a"".b"."c"') == ('a".b', "c")
    with pytest.raises(ConfigurationError):
        parse_table_name("a.b.c")
    with pytest.raises(ConfigurationError, match="needs key columns"):
        PostgresConfig("host=h", table="t", mode="upsert")
    with pytest.raises(ConfigurationError, match="commit_mode"):
        PostgresConfig("host=h", table="t", commit_mode="eventually")  # type: ignore[arg-type]
    assert PostgresConfig("host=h", table="t", commit_mode="per-participant").commit_mode == "per-participant"
    assert PostgresConfig("host=h", table="t", key_columns="id").key_columns == ("id",)


def test_timeouts_reach_the_session(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    """statement_timeout_s / lock_timeout_s become session settings; sessions run in UTC."""
    sink = PostgresSink(_config(postgres_endpoint, names, statement_timeout_s=5, lock_timeout_s=1.5))
    sink.fence(APP)
    conn, _ = sink._conns.control()
    settings = conn.execute(
        "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), current_setting('TimeZone')"
    ).fetchone()
    assert settings == ("5s", "1500ms", "UTC")
    sink.close()


def test_a_dropped_sink_closes_its_connections(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    """Executors never call close(): dropping the (unpickled) sink must end its sessions at once, without
    waiting for the cyclic garbage collector."""
    import gc
    import time
    import warnings

    app_name = f"eosink-drop-{uuid.uuid4().hex[:8]}"
    sink = PostgresSink(_config(postgres_endpoint, names, application_name=app_name))
    epoch = sink.fence(APP)
    _write(sink, 0, epoch, BATCH)
    count = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    with _admin(postgres_endpoint) as admin:
        assert admin.execute(count, (app_name,)).fetchone() == (2,)  # control + idle participant connection
        gc.disable()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                del sink
            deadline = time.monotonic() + 10
            while admin.execute(count, (app_name,)).fetchone() != (0,):
                assert time.monotonic() < deadline, "the dropped sink's sessions stayed open"
                time.sleep(0.02)
        finally:
            gc.enable()


def test_gid_is_short_ascii_and_parses_back() -> None:
    gid = gid_for("ctl ✓", "ä" * 500, 2**62, 2**62, 2**31 - 1, "x" * 300)
    assert len(gid.encode()) < 200 and gid.isascii()
    assert parse_gid(gid) == (2**62, 2**62, 2**31 - 1)


# -- configuration and processes --------------------------------------------------------------------------


def test_max_prepared_transactions_zero_is_a_configuration_error(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With max_prepared_transactions = 0 (simulated), transactional tasks stop with ConfigurationError naming it;
    non-transactional tasks do not need prepared transactions."""
    monkeypatch.setattr(sink_module, "_max_prepared", lambda conn: 0)
    sink = PostgresSink(_config(postgres_endpoint, names))
    epoch = sink.fence(APP)
    with pytest.raises(ConfigurationError, match="max_prepared_transactions") as info:
        _write(sink, 0, epoch, BATCH)
    assert info.value.fix and "max_prepared_transactions" in info.value.fix
    _write(sink, 0, epoch, BATCH, keys=("id",), transactional=False)


def test_pickles_without_connections(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    """A used sink pickles to its configuration; the copy opens its own connections and sees the same state."""
    sink = PostgresSink(_config(postgres_endpoint, names))
    epoch = sink.fence(APP)
    c = _write(sink, 0, epoch, BATCH)
    copy = pickle.loads(pickle.dumps(sink))
    assert copy.config == sink.config
    assert [r.id for r in copy.recover(APP)] == [c.id]
    _commit(copy, 0, epoch, [c])
    sink.close()
    assert sink.fetch_last_bundle(APP) is not None  # usable again after close


def test_a_reused_attempt_id_is_a_configuration_error(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    sink = PostgresSink(_config(postgres_endpoint, names))
    task = TaskRef(BatchRef(APP, 0), sink.fence(APP), 0, "same-attempt")
    txn = sink.begin(task)
    sink.write(txn, BATCH)
    sink.pre_commit(txn)
    with pytest.raises(ConfigurationError, match=r"own TaskRef\.attempt"):
        sink.begin(task)


def test_fenced_writer_cannot_prepare_or_commit(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    sink = PostgresSink(_config(postgres_endpoint, names))
    old = sink.fence(APP)
    task = TaskRef(BatchRef(APP, 0), old, 0, "a1")
    txn = sink.begin(task)
    sink.write(txn, BATCH)
    new = sink.fence(APP)
    with pytest.raises(FencedError):
        sink.pre_commit(txn)
    c = _write(sink, 0, new, BATCH)
    with pytest.raises(FencedError):
        _commit(sink, 0, old, [c])
    assert sink.commit_status(BatchRef(APP, 0), [c]) is CommitStatus.PREPARED
    assert [r.id for r in sink.recover(APP)] == [c.id]  # the fenced attempt left nothing prepared


# -- network faults -----------------------------------------------------------------------------------------


def test_cut_final_commit_is_ambiguous_and_cut_commit_prepared_is_transient(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """Only the batch's own COMMIT is ambiguous; a lost COMMIT PREPARED reply is TransientError and the batch
    stays PREPARED, so a repeated commit completes it."""
    config = _config(postgres_endpoint, names)
    with FaultProxy(postgres_endpoint.host, postgres_endpoint.port) as proxy:
        via = PostgresSink(config.with_address("127.0.0.1", proxy.port))
        epoch = via.fence(APP)
        first = [_write(via, 0, epoch, BATCH, participant=p) for p in range(2)]
        proxy.cut_after_request(b"COMMIT PREPARED")
        with pytest.raises(TransientError):
            _commit(via, 0, epoch, first)
        direct = PostgresSink(config)
        assert direct.commit_status(BatchRef(APP, 0), first) is CommitStatus.PREPARED
        assert HARNESS.read_rows(None, names["table"]) == []
        _commit(via, 0, epoch, first)  # reconnects
        assert len(HARNESS.read_rows(None, names["table"])) == 4  # two participants, two rows each

        second = [_write(via, 1, epoch, BATCH)]
        proxy.cut_after_request(b"COMMIT\x00")
        with pytest.raises(AmbiguousCommitError):
            _commit(via, 1, epoch, second)
        assert proxy.stats.requests_cut[-1].endswith(b"COMMIT\x00")
        assert direct.commit_status(BatchRef(APP, 1), second) is CommitStatus.COMMITTED
        _commit(via, 1, epoch, second)  # harmless
        assert len(HARNESS.read_rows(None, names["table"])) == 6


def test_a_lost_reply_is_settled_by_the_bundle_never_by_a_transaction_id_alone(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """The remembered transaction id of a lost COMMIT only says whether to wait; the bundle decides.

    A promoted standby hands out again the transaction ids the old primary had handed out, and
    ``pg_xact_status`` then answers for another transaction (issue 58's silent loss). Simulated on one
    server: batch 1 is prepared, and the sink remembers, as its lost COMMIT's transaction, the id of an
    unrelated transaction that committed, on this server's lineage and on another timeline's. Pass:
    PREPARED both times (the bundle is absent), never COMMITTED; committing then lands the batch once.
    A transaction id the server calls "in the future" (it crashed before the transaction reached its
    WAL) is not waited for either; the translator makes that error a TransientError, never a bad row.
    """
    from eosink.connectors.postgres._errors import translate
    from eosink.connectors.postgres._lineage import Lineage

    config = _config(postgres_endpoint, names)
    sink = PostgresSink(config)
    epoch = sink.fence(APP)
    committables = [_write(sink, 1, epoch, BATCH)]
    batch = BatchRef(APP, 1)
    with _admin(postgres_endpoint) as admin:
        other = str(admin.execute("SELECT pg_current_xact_id()::text").fetchone()[0])  # type: ignore[index]
        assert admin.execute("SELECT pg_xact_status(%s::xid8)", (other,)).fetchone() == ("committed",)
        here = sink._lineage(sink._ctl())
        elsewhere = Lineage(here.system_identifier, here.timeline + 1, address="10.0.0.9:5432")
        for lineage in (here, elsewhere):
            sink._in_flight[batch] = (other, lineage, 0.0)
            assert sink.commit_status(batch, committables) is CommitStatus.PREPARED, lineage
        sink._in_flight[batch] = ("999999999", here, 0.0)  # never assigned here
        assert sink.commit_status(batch, committables) is CommitStatus.PREPARED
        with pytest.raises(psycopg.errors.InvalidParameterValue) as future:
            admin.execute("SELECT pg_xact_status('999999999'::xid8)")
    error = translate(config, future.value, "commit_status")
    assert isinstance(error, TransientError) and "catches up" in (error.fix or ""), error
    _commit(sink, 1, epoch, committables)
    assert len(HARNESS.read_rows(None, names["table"])) == BATCH.num_rows


def test_commits_resolved_after_a_lost_reply_are_counted_once(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A batch whose COMMIT reply was cut is committed; its resolution must count it like any commit.

    Every second batch's COMMIT reply is cut on the wire. Half of those are resolved by
    ``commit_status`` (the bundle is there), half by committing again (the bundle is found). Pass:
    ``metrics_for`` counts every batch once (batches, rows, bytes, last batch id), and the INFO
    "committed batch" line is logged once per batch.
    """
    config = _config(postgres_endpoint, names)
    caplog.set_level("INFO", logger="eosink.postgres")
    with FaultProxy(postgres_endpoint.host, postgres_endpoint.port) as proxy:
        via = PostgresSink(config.with_address("127.0.0.1", proxy.port))
        epoch = via.fence(APP)
        written = 0
        for batch_id in range(8):
            committables = [_write(via, batch_id, epoch, BATCH)]
            written += sum(int(c.payload.get("bytes", 0) or 0) for c in committables)
            if batch_id % 2 == 0:
                _commit(via, batch_id, epoch, committables)
                continue
            proxy.cut_after_request(b"COMMIT\x00")
            with pytest.raises(AmbiguousCommitError):
                _commit(via, batch_id, epoch, committables)
            if batch_id % 4 == 1:
                assert via.commit_status(BatchRef(APP, batch_id), committables) is CommitStatus.COMMITTED
            else:
                _commit(via, batch_id, epoch, committables)
            _commit(via, batch_id, epoch, committables)  # once more: still counted once
        snap = via.metrics_for(APP)
    assert len(proxy.stats.requests_cut) == 4
    assert (snap.batches_committed, snap.last_batch_id) == (8, 7)
    assert snap.rows_committed == 8 * BATCH.num_rows and snap.bytes_committed == written > 0
    assert snap.ambiguous_commits == 4 and snap.ambiguous_resolved["committed"] == 2
    lines = [r.getMessage() for r in caplog.records if "committed batch" in r.getMessage()]
    assert len(lines) == 8, lines


def test_per_participant_append_copies_straight_into_the_target(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """Per-participant mode, append: rows go into the target inside the prepared transaction, with no
    staging table; invisible until COMMIT PREPARED, visible after; a rolled-back attempt leaves nothing.

    Pass: no ``t_`` table in the control schema while prepared; 0 rows visible before the commit,
    3 after; the aborted attempt's rows never appear.
    """
    sink = PostgresSink(_config(postgres_endpoint, names, commit_mode="per-participant"))
    try:
        epoch = sink.fence(APP)
        data = pa.RecordBatch.from_pydict({"id": [1, 2, 3], "v": ["a", "b", "c"]})
        kept = _write(sink, 0, epoch, data, participant=0)
        dropped = _write(sink, 0, epoch, data, participant=1)
        with _admin(postgres_endpoint) as conn:
            staged = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename LIKE 't\\_%%'", (names["ctl"],)
            ).fetchone()
            assert staged == (0,)
            count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(names["table"]))
            assert conn.execute(count).fetchone() == (0,)
            sink.abort([dropped])
            _commit(sink, 0, epoch, [kept])
            assert conn.execute(count).fetchone() == (3,)
            assert conn.execute(
                "SELECT count(*) FROM pg_prepared_xacts WHERE gid = ANY(%s)", ([kept.id, dropped.id],)
            ).fetchone() == (0,)
    finally:
        sink.close()


# -- keyed writes: straight into the target until a key conflicts -------------------------------------------


def _rows(ids: list[int], values: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": ids, "v": list(values)})


KEYED_CASES = {
    # name: (already in the target, the writes of one attempt, expected table, staged from write #)
    "new keys go direct": ([], [([1, 2, 3], "abc"), ([4, 5], "de")], {1: "a", 2: "b", 3: "c", 4: "d", 5: "e"}, None),
    "a replay upserts": ([([1, 2, 3], "ooo")], [([1, 2, 3], "abc")], {1: "a", 2: "b", 3: "c"}, 0),
    "a key written again in the attempt: the later row wins": (
        [],
        [([1, 2, 3], "abc"), ([3, 4], "xy"), ([1, 5], "zw")],
        {1: "z", 2: "b", 3: "x", 4: "y", 5: "w"},
        1,
    ),
    "a key twice in one write: the later row wins": ([], [([6], "a"), ([7, 7], "pq")], {6: "a", 7: "q"}, 1),
}


@pytest.mark.parametrize("segment_bytes", [32 << 20, 1], ids=["one-savepoint", "savepoint-per-write"])
@pytest.mark.parametrize("case", list(KEYED_CASES))
def test_keyed_writes_go_direct_until_a_key_conflicts(
    postgres_endpoint: PostgresEndpoint,
    names: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    segment_bytes: int,
) -> None:
    """Idempotent (non-transactional, keyed) writes COPY into the target while their keys are new; the first
    conflict rolls back the open segment and stages it and every later write for the upsert.

    Pass: the table holds exactly the expected rows (later rows win, replayed keys overwritten); the attempt
    used no staging table when no key conflicted, and staged from the first conflicting write otherwise;
    no savepoint or staging table is left behind.
    """
    before, writes, expected, staged_from = KEYED_CASES[case]
    monkeypatch.setattr(sink_module, "_SEGMENT_BYTES", segment_bytes)
    sink = PostgresSink(_config(postgres_endpoint, names))
    try:
        epoch = sink.fence(APP)
        for n, (ids, values) in enumerate(before):
            _write(sink, n, epoch, _rows(ids, values), keys=("id",), transactional=False)
        task = TaskRef(BatchRef(APP, 9), epoch, 0, uuid.uuid4().hex[:16], ("id",), False)
        txn = sink.begin(task)
        staged_at = None
        for n, (ids, values) in enumerate(writes):
            sink.write(txn, _rows(ids, values))
            if staged_at is None and txn.staging is not None:
                staged_at = n
        assert staged_at == staged_from
        committable = sink.pre_commit(txn)
        assert committable.rows == sum(len(ids) for ids, _ in writes)
        with _admin(postgres_endpoint) as conn:
            table = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(sql.Identifier(names["table"]))
            assert dict(conn.execute(table).fetchall()) == expected
            left = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s AND tablename LIKE 't\\_%%'", (names["ctl"],)
            ).fetchone()
            assert left == (0,)
    finally:
        sink.close()


def test_per_participant_upsert_goes_direct_inside_the_prepared_transaction(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """Per-participant mode with upsert keys: rows go into the target inside the prepared transaction (a
    conflicting write falls back to the upsert there too); nothing is visible before COMMIT PREPARED.

    Pass: 2 rows before the batch; still the old 2 while prepared; after the commit, the replayed key
    overwritten and the new keys added.
    """
    sink = PostgresSink(_config(postgres_endpoint, names, commit_mode="per-participant"))
    try:
        epoch = sink.fence(APP)
        first = _write(sink, 0, epoch, _rows([1, 2], "oo"), keys=("id",))
        _commit(sink, 0, epoch, [first])
        task = TaskRef(BatchRef(APP, 1), epoch, 0, uuid.uuid4().hex[:16], ("id",), True)
        txn = sink.begin(task)
        sink.write(txn, _rows([3, 4], "cd"))
        assert txn.direct and txn.staging is None
        sink.write(txn, _rows([2, 5], "be"))
        assert txn.staging is not None
        second = sink.pre_commit(txn)
        table = sql.SQL("SELECT id, v FROM {} ORDER BY id").format(sql.Identifier(names["table"]))
        with _admin(postgres_endpoint) as conn:
            assert dict(conn.execute(table).fetchall()) == {1: "o", 2: "o"}
            _commit(sink, 1, epoch, [second])
            assert dict(conn.execute(table).fetchall()) == {1: "o", 2: "b", 3: "c", 4: "d", 5: "e"}
    finally:
        sink.close()
