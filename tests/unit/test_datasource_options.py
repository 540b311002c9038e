"""The string options of ``format("eosink")``: parsed into a sink, or refused with a clear error before any write."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.postgres import PostgresSink
from eosink.datasource import CONNECTORS, parse_options
from eosink.datasource._options import convert, options_from_config, options_table
from eosink.errors import ConfigurationError
from eosink.strategies import Idempotent, TxidCheck

DOCS = Path(__file__).resolve().parents[2] / "docs" / "datasource.md"
BASE = {"sink": "postgres", "app_id": "payments", "checkpointLocation": "/chk/p", "postgres.table": "public.t"}
SECRET = "postgresql://u:s3cr3t-pw@db.example/ledger"


def test_postgres_options_make_the_sink_and_strategy() -> None:
    """Pass: keys are case-insensitive, values converted by the config's field types, defaults kept."""
    parsed = parse_options(
        {**BASE, "POSTGRES.CONNINFO": SECRET, "postgres.connect_timeout_s": "3.5", "postgres.create_table": "true"},
        streaming=True,
    )
    assert isinstance(parsed.sink, PostgresSink) and isinstance(parsed.strategy, TxidCheck)
    config = parsed.sink.config
    assert (config.connect_timeout_s, config.create_table, config.table) == (3.5, True, "public.t")
    assert (parsed.app_id, parsed.checkpoint_location, parsed.batch_id) == ("payments", "/chk/p", None)


def test_a_secret_comes_from_the_environment_and_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass: '<sink>.<field>_env' reads the variable; the secret is in no repr; a missing variable is named."""
    monkeypatch.setenv("EOSINK_TEST_PG", SECRET)
    parsed = parse_options({**BASE, "postgres.conninfo_env": "EOSINK_TEST_PG"}, streaming=True)
    assert "s3cr3t-pw" in parsed.sink.config.conninfo and "s3cr3t-pw" not in repr(parsed)
    with pytest.raises(ConfigurationError, match="'EOSINK_TEST_NOT_SET'"):
        parse_options({**BASE, "postgres.conninfo_env": "EOSINK_TEST_NOT_SET"}, streaming=True)


def test_idempotent_needs_key_columns_and_takes_them() -> None:
    """Pass: idempotent without key_columns is refused (no generated keys here); with them, they are the keys."""
    with pytest.raises(ConfigurationError, match="needs key columns"):
        parse_options({**BASE, "postgres.conninfo": SECRET, "strategy": "idempotent"}, streaming=True)
    parsed = parse_options(
        {**BASE, "postgres.conninfo": SECRET, "strategy": "Idempotent", "key_columns": "id, account"}, streaming=True
    )
    assert parsed.strategy == Idempotent(key_columns=("id", "account"))


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"sink": "postgres", "checkpointLocation": "/c"}, "Option 'app_id' is missing"),
        ({**BASE, "sink": "mongodb"}, "Unknown sink 'mongodb'"),
        ({**BASE, "postgres.conninfo": SECRET, "postgres.tabel": "t"}, "Unknown option 'postgres.tabel'"),
        ({**BASE, "postgres.conninfo": SECRET, "kafka.topic": "t"}, "options of sink 'kafka'"),
        ({**BASE, "postgres.conninfo": SECRET, "retries": "3"}, r"Unknown option\(s\) \['retries'\]"),
        ({**BASE, "postgres.conninfo": SECRET, "postgres.connect_timeout_s": "ten"}, "must be a number, got 'ten'"),
        ({**BASE, "postgres.conninfo": SECRET, "postgres.create_table": "maybe"}, "must be true or false"),
        ({**BASE, "postgres.conninfo": SECRET, "postgres.mode": "merge"}, "must be one of 'append', 'upsert'"),
        (BASE, "postgres.conninfo missing"),
        ({**BASE, "postgres.conninfo": SECRET, "strategy": "2pc"}, "2pc strategy is not offered"),
        ({**BASE, "postgres.conninfo": SECRET, "strategy": "exactly"}, "Unknown strategy"),
        ({**BASE, "postgres.conninfo": SECRET, "key_columns": "id"}, "is for the idempotent strategy"),
        ({**BASE, "postgres.conninfo": SECRET, "batch_id": "7"}, "is for batch writes"),
        ({k: v for k, v in BASE.items() if k != "checkpointLocation"}, "needs Spark's checkpoint location"),
        ({**BASE, "postgres.conninfo": SECRET, "postgres.retention_s.x": "1"}, "takes one value"),
    ],
)
def test_bad_options_are_refused_with_the_option_named(options: dict[str, str], problem: str) -> None:
    """Pass: a ConfigurationError whose text names the problem and carries a fix; no secret in it."""
    with pytest.raises(ConfigurationError, match=problem) as info:
        parse_options(options, streaming=True)
    assert info.value.fix and "s3cr3t-pw" not in str(info.value)


def test_the_options_spark_itself_adds_pass_and_an_unknown_one_beside_them_is_still_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Spark puts ``queryName`` (from ``.queryName(...)``) and ``path`` (from ``.start(path)``) among the
    options, lower-cased or not. Pass: both parse, the path is reported as unused; with a misspelt option
    beside them, the error names only that one."""
    spark_adds = {"queryName": "payments", "path": "/out/payments", "checkpointlocation": "/chk/p"}
    with caplog.at_level("WARNING", logger="eosink.datasource"):
        parsed = parse_options({**BASE, **spark_adds, "postgres.conninfo": SECRET}, streaming=True)
    assert parsed.app_id == "payments" and "ignores the path" in caplog.text
    with pytest.raises(ConfigurationError, match=r"Unknown option\(s\) \['quryname'\]\.") as info:
        parse_options({**BASE, **spark_adds, "postgres.conninfo": SECRET, "quryName": "x"}, streaming=True)
    assert "path" not in str(info.value).split("Fix:")[0]


def test_a_malformed_value_is_shown_unless_the_option_may_hold_a_secret() -> None:
    """Pass: a wrong number is quoted back, except under an option whose name says it may hold a secret."""
    with pytest.raises(ConfigurationError, match="got 'many'"):
        convert("s3.max_attempts", "many", int)
    with pytest.raises(ConfigurationError) as info:
        convert("kafka.sasl_retries", "pw-123", int)
    assert "pw-123" not in str(info.value) and "hidden" in str(info.value)


def test_a_map_option_takes_entries() -> None:
    """Pass: 'kafka.producer_options.<key>' entries become the producer_options map."""
    parsed = parse_options(
        {
            "sink": "kafka",
            "app_id": "a",
            "checkpointLocation": "/c",
            "kafka.bootstrap_servers": "127.0.0.1:9092",
            "kafka.topic": "t",
            "kafka.producer_options.linger_ms": "5",
        },
        streaming=True,
    )
    assert dict(parsed.sink.config.producer_options) == {"linger_ms": "5"}


@pytest.mark.parametrize("sink", sorted(CONNECTORS))
def test_the_docs_list_every_option_of_every_sink(sink: str) -> None:
    """docs/datasource.md holds each connector's options table as generated from its config.

    Pass: the table between the page's markers equals options_table(sink); regenerate it when a config changes.
    """
    text = DOCS.read_text()
    m = re.search(rf"<!-- options:{sink} -->\n(.*?)\n<!-- /options:{sink} -->", text, re.DOTALL)
    assert m is not None, f"docs/datasource.md has no options table for {sink}"
    assert m.group(1) == options_table(sink)


def test_register_without_python_data_sources_names_what_to_use() -> None:
    """PySpark 3.5 has no Python data sources: registering says so and points to foreach_batch.

    Pass: a session object without ``dataSource`` (as PySpark 3.5's) gets a ConfigurationError naming 4.0.
    """
    from eosink.spark import register

    with pytest.raises(ConfigurationError, match=r"PySpark 4\.0 or newer") as info:
        register(object())
    assert "foreach_batch" in str(info.value)


def _configs() -> list[tuple[str, Any]]:
    from eosink.connectors.delta import DeltaConfig
    from eosink.connectors.hdfs import HdfsConfig
    from eosink.connectors.kafka import KafkaConfig
    from eosink.connectors.postgres import PostgresConfig
    from eosink.connectors.s3 import S3Config

    return [
        ("postgres", PostgresConfig(SECRET, "public.t", control_schema="c", create_table=True, lock_timeout_s=2.5)),
        ("postgres", PostgresConfig(SECRET, "t", mode="upsert", key_columns=("id", "day"), cleanup_interval_s=None)),
        ("postgres", PostgresConfig(SECRET, ("eosink_bench", "t_1"), commit_mode="per-participant")),
        ("s3", S3Config("bkt", "p/x", format="jsonl", partition_by=("a", "b"), path_style=True, max_attempts=5)),
        ("kafka", KafkaConfig("127.0.0.1:9092", topic="t", value_format="json", producer_options={"linger_ms": "5"})),
        ("hdfs", HdfsConfig("hdfs://127.0.0.1:8020/data/x", replication=2, client_config={"a.b": "c"})),
        ("hdfs", HdfsConfig("hdfs://ns1/data/x", namenodes={"nn0": "10.0.0.1:8020", "nn1": "10.0.0.2:8020"})),
        ("delta", DeltaConfig("hdfs://ns1/tables/x", namenodes={"nn0": "10.0.0.1:8020", "nn1": "10.0.0.2:8020"})),
    ]


@pytest.mark.parametrize(("sink", "config"), _configs(), ids=lambda v: v if isinstance(v, str) else "")
def test_options_from_a_config_parse_back_to_the_same_config(
    sink: str, config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """options_from_config is how a config object becomes format("eosink") options.

    Pass: the options parse back to an equal config, for every connector; a field read from the
    environment appears as '<field>_env' naming the variable, never with its value.
    """
    monkeypatch.setenv("EOSINK_TEST_SECRET", SECRET)
    from_env = {"conninfo": "EOSINK_TEST_SECRET"} if sink == "postgres" else None
    options = options_from_config(sink, config, from_env=from_env)
    assert all(SECRET not in v for v in options.values())
    parsed = parse_options({"sink": sink, "app_id": "a", "checkpointLocation": "/c", **options}, streaming=True)
    assert parsed.sink.config == config  # type: ignore[attr-defined]


def test_a_config_value_no_option_text_reads_back_as_is_refused() -> None:
    """A table named with a comma ('a,b') would read back as the pair (schema a, table b).

    Pass: options_from_config raises a ConfigurationError naming the field instead of giving options
    that make another config; a (schema, table) pair is written as 'schema,table' and reads back.
    """
    from eosink.connectors.postgres import PostgresConfig

    with pytest.raises(ConfigurationError, match="'table'"):
        options_from_config("postgres", PostgresConfig(SECRET, "a,b"), from_env={"conninfo": "PG"})
    options = options_from_config("postgres", PostgresConfig(SECRET, ("s", "t")), from_env={"conninfo": "PG"})
    assert options["postgres.table"] == "s,t"


def test_options_from_a_config_never_carry_its_secrets() -> None:
    """Pass: a config whose field holds a secret (a password in a PostgreSQL URL, an S3 secret key) gets a
    ConfigurationError naming the option and from_env, and the secret is not in the message."""
    from eosink.connectors.postgres import PostgresConfig
    from eosink.connectors.s3 import S3Config

    with pytest.raises(ConfigurationError, match=r"'postgres\.conninfo'") as info:
        options_from_config("postgres", PostgresConfig(SECRET, "t"))
    assert "from_env" in (info.value.fix or "") and "s3cr3t-pw" not in str(info.value)
    config = S3Config("bkt", "p", access_key_id="AKIA1", secret_access_key="sk-s3cr3t")
    with pytest.raises(ConfigurationError, match=r"'s3\.secret_access_key'"):
        options_from_config("s3", config)
    options = options_from_config("s3", config, from_env={"secret_access_key": "S3_SECRET"})
    assert options["s3.secret_access_key_env"] == "S3_SECRET" and "sk-s3cr3t" not in str(options)


def test_rows_become_the_arrow_batches_sparks_arrow_path_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """arrow=false (and PySpark 4.0's stream writer) hands rows to a task; eosink turns them into Arrow.

    Pass: a timestamp column (rows carry naive local times; here the zone is New York) becomes
    timestamp[us, tz=UTC] holding the same instant, other columns as Spark types them, in 10,000-row batches.
    """
    import time
    from datetime import datetime, timedelta, timezone

    from pyspark.sql import Row
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    from eosink.datasource._writers import _arrow

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        schema = StructType(
            [StructField("id", LongType()), StructField("name", StringType()), StructField("at", TimestampType())]
        )
        start = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)
        instants = [start + timedelta(seconds=i) for i in range(10_001)]
        rows = [Row(id=i, name=f"n{i}", at=t.astimezone().replace(tzinfo=None)) for i, t in enumerate(instants)]
        rows.append(Row(id=-1, name=None, at=None))
        batches = list(_arrow(iter(rows), schema))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert [b.num_rows for b in batches] == [10_000, 2]
    assert str(batches[0].schema.field("at").type) == "timestamp[us, tz=UTC]"
    ats = [v for b in batches for v in b.column("at").to_pylist()]
    assert ats == [*instants, None]


def test_several_sinks_make_a_fan_out_in_the_order_given() -> None:
    """Pass: 'sink' lists the sinks in commit order, by connector or by name; each one's options go under its
    name; the first is also ``sink``; one sink is no fan-out."""
    both = {
        "sink": "postgres, kafka",
        "app_id": "payments",
        "checkpointLocation": "/chk/p",
        "postgres.table": "public.t",
        "postgres.conninfo": SECRET,
        "kafka.bootstrap_servers": "127.0.0.1:9092",
        "kafka.topic": "events",
    }
    parsed = parse_options(both, streaming=True)
    assert [name for name, _ in parsed.fanout] == ["postgres", "kafka"]
    assert parsed.sink is parsed.fanout[0][1] and isinstance(parsed.sink, PostgresSink)
    named = parse_options(
        {
            "sink": "orders=postgres,audit=postgres",
            "app_id": "payments",
            "checkpointLocation": "/chk/p",
            "orders.conninfo": SECRET,
            "orders.table": "public.orders",
            "audit.conninfo": SECRET,
            "audit.table": "public.audit",
        },
        streaming=True,
    )
    assert [(name, sink.config.table) for name, sink in named.fanout] == [  # type: ignore[attr-defined]
        ("orders", "public.orders"),
        ("audit", "public.audit"),
    ]
    assert parse_options({**BASE, "postgres.conninfo": SECRET}, streaming=True).fanout == ()


PG = {"postgres.conninfo": SECRET, "postgres.table": "t"}


@pytest.mark.parametrize(
    ("sink", "extra", "problem"),
    [
        ("postgres,postgres", PG, "more than one sink 'postgres'"),
        ("postgres,mongodb", PG, "Unknown sink 'mongodb'"),
        ("led ger=postgres,kafka", {}, "Sink name 'led ger'"),
        ("postgres,kafka", {**PG, "ledger.table": "t"}, r"Unknown option\(s\) \['ledger.table'\]"),
        ("postgres,kafka", {**PG, "kafka.tpoic": "t"}, "Unknown option 'kafka.tpoic'"),
        ("postgres,kafka", {**PG, "kafka.topic": "t"}, r"Option\(s\) kafka.bootstrap_servers missing"),
        ("a=postgres,b=kafka", {"a.conninfo": SECRET, "a.table": "t", "b.topic": "t"}, "b.bootstrap_servers missing"),
        ("a=postgres,b=kafka", {**PG, "b.topic": "t"}, r"under 'a\.' or 'b\.'"),
    ],
)
def test_a_bad_fan_out_is_refused_before_any_write(sink: str, extra: dict[str, str], problem: str) -> None:
    """Pass: a repeated or unknown sink, a bad name, options under no sink's name or a missing one: each a
    ConfigurationError naming it (and the member's own prefix), never the secret."""
    options = {"sink": sink, "app_id": "p", "checkpointLocation": "/c", **extra}
    with pytest.raises(ConfigurationError, match=problem) as caught:
        parse_options(options, streaming=True)
    assert "s3cr3t-pw" not in str(caught.value)


def test_options_from_config_names_a_fan_outs_sinks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass: each config's options go under the name given, and the named fan-out parses back to the same
    configs (two PostgreSQL tables, told apart by name)."""
    from eosink.connectors.postgres import PostgresConfig

    monkeypatch.setenv("EOSINK_TEST_PG", SECRET)
    configs = {"orders": PostgresConfig(SECRET, "public.orders"), "audit": PostgresConfig(SECRET, "public.audit")}
    options = {"sink": "orders=postgres,audit=postgres", "app_id": "p", "checkpointLocation": "/c"}
    for name, config in configs.items():
        made = options_from_config("postgres", config, from_env={"conninfo": "EOSINK_TEST_PG"}, name=name)
        assert all(key.startswith(f"{name}.") for key in made) and "s3cr3t-pw" not in str(made)
        options |= made
    parsed = parse_options(options, streaming=True)
    assert {name: sink.config for name, sink in parsed.fanout} == configs  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"sink": "ledger=postgres", "ledger.conninfo": SECRET, "ledger.table": "t"}, "names its one sink"),
        ({"sink": "=postgres,kafka", **PG}, "Sink name ''"),
        ({"sink": "a=postgres,b=kafka", **PG, "b.topic": "t"}, r"sinks are named \['a', 'b'\]"),
    ],
)
def test_sink_names_belong_to_a_fan_out(options: dict[str, str], problem: str) -> None:
    """Pass: one sink with a name, an empty name, or a connector's options under a named fan-out are refused,
    naming the fix."""
    with pytest.raises(ConfigurationError, match=problem):
        parse_options({"app_id": "p", "checkpointLocation": "/c", **options}, streaming=True)


@pytest.mark.parametrize("sink", ["delta", "s3"])
def test_a_config_whose_credentials_come_from_the_environment_reads_back_the_same(
    sink: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A config that takes its store's credentials from the environment chain (``DeltaConfig(table)``,
    ``S3Config.from_env``), given to options_from_config with the secret named by variable. Pass: the options
    parse back (on a worker with the same environment) to a sink reaching the store with the same key and
    secret; the secret is in no option. (Delta's config sets no field from the environment: the option naming
    the secret's variable came without the key, and every worker failed with 'Only one of ...'.)"""
    monkeypatch.setenv("EOSINK_S3_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("EOSINK_S3_ACCESS_KEY", "env-key")
    monkeypatch.setenv("EOSINK_S3_SECRET_KEY", "env-s3cr3t")
    if sink == "delta":
        from eosink.connectors.delta import DeltaConfig

        config: Any = DeltaConfig("s3://bkt/table")
    else:
        from eosink.connectors.s3 import S3Config

        config = S3Config.from_env("bkt", "prefix")
    made = options_from_config(sink, config, from_env={"secret_access_key": "EOSINK_S3_SECRET_KEY"})
    assert "env-s3cr3t" not in str(made)
    parsed = parse_options({"sink": sink, "app_id": "p", "checkpointLocation": "/c", **made}, streaming=True)
    back = parsed.sink.config  # type: ignore[attr-defined]
    conn = back.s3 if sink == "delta" else back.connection()
    assert (conn.endpoint_url, conn.access_key_id, conn.secret_access_key) == (
        "http://127.0.0.1:9",
        "env-key",
        "env-s3cr3t",
    )
