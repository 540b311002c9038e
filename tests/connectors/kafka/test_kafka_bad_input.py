"""Bad input into a real broker: a typed error that names the problem and the fix, nothing visible,
and after the fix a restart from the same checkpoint that lands every batch exactly once.

Each case drives the real Coordinator in Spark's order (offsets, foreachBatch, commit log, then
the 2PC commit) on a :class:`~eosink.contracts._mini.FakeCheckpoint`; a restart is a new sink and
a new Coordinator on the same checkpoint and app_id.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.kafka import KafkaConfig, KafkaSink
from eosink.connectors.kafka.admin import KafkaAdmin
from eosink.connectors.kafka.testing import KafkaHarness, by_key, read_topic
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, Variant
from eosink.contracts.harness import Namespace
from eosink.contracts.secrets import assert_secret_free
from eosink.errors import BadRecordError, ConfigurationError, EosinkError, SchemaError, TransientError

from .conftest import HARNESS

APP = "app_bad"
TWO_PC = next(v for v in VARIANTS if v.id == "2pc")
BY_ID = next(v for v in VARIANTS if v.id == "idempotent-id")


class ArrowBatch(MemoryBatch):
    """A MemoryBatch whose rows have an Arrow ``schema`` of their own."""

    def __init__(self, rows: Sequence[dict[str, Any]], schema: pa.Schema, **kwargs: Any) -> None:
        super().__init__(rows, **kwargs)
        self.schema = schema

    def shares(self, by_hash: bool = False) -> list[list[pa.RecordBatch]]:
        size = -(-len(self.rows) // self.participants)
        groups = [self.rows[i * size : (i + 1) * size] for i in range(self.participants)]
        return [[pa.RecordBatch.from_pylist(g, schema=self.schema)] if g else [] for g in groups]


SCHEMA = pa.schema([("id", pa.int64()), ("account", pa.string()), ("amount", pa.int64())])


def batches(n: int = 3, *, bad: dict[str, Any] | None = None) -> list[ArrowBatch]:
    """``n`` batches of 6 rows; ``bad`` overrides fields of the second batch's third row."""
    out = []
    for b in range(n):
        rows = [{"id": b * 100 + i, "account": f"a{i % 3}", "amount": i} for i in range(6)]
        if bad is not None and b == 1:
            rows[2] = {**rows[2], **bad}
        out.append(ArrowBatch(rows, SCHEMA, participants=2))
    return out


class Driver(SparkOrderDriver[KafkaConfig]):
    """:class:`~eosink.contracts._mini.SparkOrderDriver` around :class:`KafkaSink`."""

    def __init__(self, tmp_path: Path, variant: Variant, config: KafkaConfig) -> None:
        super().__init__(tmp_path, variant, config, KafkaSink, APP)


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    made = Namespace(f"bad{uuid.uuid4().hex[:8]}", tmp_path / "ns")
    yield made
    HARNESS.cleanup(made)


def visible(ns: Namespace, keyed: bool = False) -> Counter[str]:
    """The committed records' values (one per key when ``keyed``), as canonical JSON."""
    records = read_topic(HARNESS.admin(), HARNESS.topic(ns), KafkaHarness.partitions)
    if keyed:
        records = by_key(records)
    return Counter(json.dumps(json.loads(r.value), sort_keys=True) for r in records if r.value is not None)


def expected(work: Sequence[MemoryBatch]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for b in work for r in b.rows)


def assert_refused(error: EosinkError, *words: str) -> None:
    """The message names the problem (``words``) and a fix."""
    text = str(error)
    for word in words:
        assert word.lower() in text.lower(), f"{word!r} not in: {text}"
    assert getattr(error, "fix", None) or "fix" in text.lower(), f"no fix named: {text}"


def test_raw_format_without_a_value_column_stops_before_anything_is_visible(tmp_path: Path, ns: Namespace) -> None:
    HARNESS.create_topics(ns)
    driver = Driver(tmp_path, TWO_PC, HARNESS.config(ns, value_format="raw"))
    work = batches()
    err = driver.fail(work, SchemaError)
    assert_refused(err, "value")
    assert visible(ns) == Counter()
    driver.restart(HARNESS.config(ns))  # the fix: JSON values of every column
    driver.run(work)
    driver.close()
    assert visible(ns) == expected(work)


def test_oversized_record_is_refused_and_the_restart_after_the_fix_is_exact(tmp_path: Path, ns: Namespace) -> None:
    HARNESS.create_topics(ns)
    driver = Driver(tmp_path, TWO_PC, HARNESS.config(ns, max_record_bytes=200))
    work = batches(bad={"account": "x" * 500})
    err = driver.fail(work, BadRecordError)
    assert_refused(err, "bytes")
    assert visible(ns) == expected(work[:1]), "only batch 0 (committed before the bad one) is visible"
    driver.restart(HARNESS.config(ns, max_record_bytes=10_000))
    driver.run(work)
    driver.close()
    assert visible(ns) == expected(work)


def test_null_upsert_key_is_refused(tmp_path: Path, ns: Namespace) -> None:
    HARNESS.create_topics(ns)
    driver = Driver(tmp_path, BY_ID, HARNESS.config(ns))
    work = batches(bad={"id": None})
    err = driver.fail(work, BadRecordError)
    assert_refused(err, "id", "null")
    assert visible(ns, keyed=True) == expected(work[:1])
    fixed = batches(bad={"id": 999})
    driver.restart()
    driver.run(fixed)
    driver.close()
    assert visible(ns, keyed=True) == expected(fixed)


def test_missing_topic_without_create_topic(tmp_path: Path, ns: Namespace) -> None:
    topic = f"eo_{ns.name}_absent"
    driver = Driver(tmp_path, TWO_PC, HARNESS.config(ns, topic=topic))
    err = driver.fail(batches(), ConfigurationError)
    assert_refused(err, topic, "create_topic")
    driver.restart(HARNESS.config(ns, topic=topic, create_topic=True, topic_partitions=2))
    work = batches()
    driver.run(work)
    driver.close()
    try:
        records = read_topic(HARNESS.admin(), topic, 2)
        assert Counter(json.dumps(json.loads(r.value), sort_keys=True) for r in records if r.value) == expected(work)
    finally:
        with contextlib.suppress(Exception):
            HARNESS.admin().delete_topics([topic])


def test_invalid_topic_in_a_rows_topic_column_is_refused(tmp_path: Path, ns: Namespace) -> None:
    HARNESS.create_topics(ns)
    schema = SCHEMA.append(pa.field("topic", pa.string()))
    work = [ArrowBatch([{**r, "topic": HARNESS.topic(ns)} for r in b.rows], schema) for b in batches()]
    work[1].rows[0]["topic"] = "../etc/passwd"
    driver = Driver(tmp_path, TWO_PC, HARNESS.config(ns))
    err = driver.fail(work, BadRecordError)
    assert_refused(err, "../etc/passwd")
    assert len(visible(ns)) == 6, "batch 0 only"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"topic": "bad topic"}, ["bad topic", "topic name"]),
        ({"transactional_id_prefix": "has space"}, ["has space"]),
        ({"producer_options": {"ack": "all"}}, ["ack", "acks"]),  # unknown option: the near match is named
        ({"producer_options": {"acks": 1}}, ["acks", "all"]),
        ({"producer_options": {"transactional_id": "mine"}}, ["transactional_id", "transactional_id_prefix"]),
        ({"value_format": "avro"}, ["avro", "json"]),
        ({"transaction_timeout_ms": 0}, ["transaction_timeout_ms"]),
        ({"compression": "brotli"}, ["brotli", "zstd"]),
        ({"producer_options": {"compression_type": "gzip"}}, ["compression_type", "compression="]),
    ],
    ids=["topic-name", "prefix", "unknown-option", "acks", "own-option", "format", "timeout", "codec", "codec-option"],
)
def test_bad_configuration_is_refused_when_the_config_is_made(options: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        KafkaConfig("127.0.0.1:9092", **{"topic": "t", **options})
    assert_refused(info.value, *words)


def test_a_codec_whose_library_is_missing_is_named_with_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka import codec

    monkeypatch.setattr(codec, "has_lz4", lambda: False)
    with pytest.raises(ConfigurationError) as info:
        KafkaConfig("127.0.0.1:9092", topic="t", compression="lz4").producer_kwargs()
    assert_refused(info.value, "lz4", "pip install")
    assert KafkaConfig("127.0.0.1:9092", topic="t", compression="gzip").producer_kwargs()["compression_type"] == "gzip"


def test_transaction_timeout_above_the_brokers_maximum_is_refused_at_setup(ns: Namespace) -> None:
    HARNESS.create_topics(ns)
    sink = KafkaSink(HARNESS.config(ns, transaction_timeout_ms=10 * 24 * 3600 * 1000))
    try:
        with pytest.raises(ConfigurationError) as info:
            sink.setup(APP)
        assert_refused(info.value, "transaction.max.timeout.ms")
    finally:
        sink.close()


def test_secrets_never_appear_in_reprs_or_errors(tmp_path: Path, ns: Namespace) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    options = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "u"}
    # A 3 s bootstrap bound (10 s by default): the handshake fails the same way, sooner.
    config = HARNESS.config(
        ns, producer_options={**options, "sasl_plain_password": secret, "bootstrap_timeout_ms": 3000}
    )
    sink = KafkaSink(config)
    assert_secret_free(config, [secret])
    assert_secret_free(sink, [secret])
    assert_secret_free(KafkaAdmin(config), [secret])
    with pytest.raises(EosinkError) as info:  # the broker's listener speaks PLAINTEXT: the handshake fails
        sink.setup(APP)
    sink.close()
    assert_secret_free(info.value, [secret])
    assert secret not in config.scrub(f"the password was {secret}")


def test_unreachable_broker_is_a_typed_error_and_the_restart_is_exact(tmp_path: Path, ns: Namespace) -> None:
    HARNESS.create_topics(ns)
    dead = HARNESS.config(
        ns, bootstrap="127.0.0.1:1", producer_options={"request_timeout_ms": 3000, "bootstrap_timeout_ms": 3000}
    )
    driver = Driver(tmp_path, TWO_PC, dead)
    err = driver.fail(batches(), (ConfigurationError, TransientError))
    assert_refused(err, "127.0.0.1:1")
    assert visible(ns) == Counter()
    driver.restart(HARNESS.config(ns))
    work = batches()
    driver.run(work)
    driver.close()
    assert visible(ns) == expected(work)


def test_status_shows_prepared_work_with_its_expiry_then_nothing_after_recovery(tmp_path: Path, ns: Namespace) -> None:
    """A batch prepared by a driver that died before its commit is in doubt: ``eosink status``
    lists it (exit 1) with its age and time left; ``eosink recover`` settles it (exit 0 after)."""
    from eosink.contract import BatchRef
    from eosink.contracts._steps import prepare, rows_for

    sink = HARNESS.make_sink(ns)
    sink.setup(APP)
    epoch = sink.fence(APP)
    prepare(sink, BatchRef(APP, 0), epoch, 0, rows_for(APP, 0, 0, 4))
    sink.close()
    config = HARNESS.config(ns)
    status = KafkaAdmin(config).status(APP)
    (app,) = status.apps
    assert [w.kind for w in app.in_doubt] == ["prepared"] and app.in_doubt[0].batch_id == 0
    work = app.in_doubt[0]
    assert work.expires_in_s is not None and 0 < work.expires_in_s <= config.transaction_timeout_ms / 1000
    argv = [
        *("--sink", "kafka", "--bootstrap-servers", config.bootstrap_servers),
        *("--progress-topic", config.progress_topic, "--transactional-id-prefix", config.transactional_id_prefix),
        *("--app-id", APP),
    ]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "eosink.cli", *args, *argv], capture_output=True, text=True, timeout=120
        )

    shown = cli("status")
    assert shown.returncode == 1 and work.id in shown.stdout, shown.stdout + shown.stderr
    with pytest.raises(ConfigurationError):
        KafkaAdmin(config).status("no-such-app")
    KafkaAdmin(config).drop_app(APP)
    assert cli("status").returncode == 0
    assert not KafkaAdmin(config).status(APP).apps[0].in_doubt
