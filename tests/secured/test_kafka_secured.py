"""Kafka secured: SASL_SSL only (SCRAM-SHA-512, PLAIN), ACLs with no default allow, a writer holding only the
documented ACLs.

Against ``eosink services up kafka-secure`` (:mod:`eosink.services.kafka_secure`):

* the contract suite's cases that need no fault proxy, as the writer;
* each documented ACL (:func:`eosink.connectors.kafka.grants.writer_acls`) left out in turn: the query stops
  with a :class:`PermissionDeniedError` naming it, nothing transactional is visible; granted, a restart lands
  every batch once;
* wrong credentials, an untrusted certificate, a host name mismatch and TLS off: each a typed error (not a
  bootstrap timeout retried for ever), the password nowhere in the error, the logs or the output;
* ``eosink status`` and ``eosink recover`` as the writer.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.kafka import KafkaConfig, KafkaSink
from eosink.connectors.kafka.grants import writer_acls
from eosink.connectors.kafka.testing import SecureKafkaHarness
from eosink.contracts import Namespace, contract_tests
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, make_rows
from eosink.contracts.secrets import assert_secret_free
from eosink.errors import AuthenticationError, EosinkError, PermissionDeniedError, TlsError
from eosink.services import get_service
from eosink.services._tls import TestCA
from eosink.services.kafka_secure import SecureKafkaEndpoint
from eosink.services.proxy import FaultProxy

from ._operations import leave_in_doubt, status_and_recover

HARNESS = SecureKafkaHarness()
TestSecureKafkaContract = contract_tests(HARNESS, name="TestSecureKafkaContract")

APP = "app_secured"
VARIANT = {v.id: v for v in VARIANTS}


@pytest.fixture(scope="module")
def endpoint() -> SecureKafkaEndpoint:
    found = get_service("kafka-secure").endpoint()  # ServiceError (not a skip) when it is not running
    assert isinstance(found, SecureKafkaEndpoint)
    return found


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    made = Namespace(f"s{uuid.uuid4().hex[:10]}", tmp_path)
    yield made
    HARNESS.cleanup(made)


def _config(ns: Namespace, endpoint: SecureKafkaEndpoint, **options: Any) -> KafkaConfig:
    return KafkaConfig(
        endpoint.bootstrap_servers,
        topic=HARNESS.topic(ns),
        value_format="json",
        progress_topic=f"eo_{ns.name}_progress",
        transactional_id_prefix=f"eo-{ns.name}",
        producer_options={**endpoint.writer_options(), **options.pop("producer_options", {})},
        **options,
    )


def _topic(ns: Namespace) -> None:
    """The target topic only (the progress topic is the writer's to create, or the administrator's)."""
    HARNESS.admin().create_topics(
        {HARNESS.topic(ns): {"num_partitions": HARNESS.partitions, "replication_factor": 1}}, wait_for_metadata=True
    )
    HARNESS._made.add(ns.name)  # cleaned up with the namespace


def _batches() -> list[MemoryBatch]:
    return [MemoryBatch(make_rows(b), participants=2) for b in range(2)]


def _canon(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


WALK = [(strategy, acl.name) for strategy in ("2pc", "idempotent-id") for acl in writer_acls(KafkaConfig("b:1"))]
WALK.append(("2pc", "topic-create"))  # only with create_topic=True: the target topic is the writer's to create


@pytest.mark.parametrize(("strategy", "left_out"), WALK)
def test_each_documented_acl_is_needed(
    ns: Namespace, endpoint: SecureKafkaEndpoint, strategy: str, left_out: str
) -> None:
    """Without ``left_out`` the query stops with PermissionDeniedError naming it, before anything is visible
    under either strategy; with the ACL created, a restart from the same checkpoint lands every batch once.
    ``topic-create`` is walked with create_topic=True and no target topic yet: it must not appear."""
    creates = left_out == "topic-create"
    if creates:
        HARNESS._made.add(ns.name)  # the sink makes the topic; cleaned up with the namespace
    else:
        _topic(ns)
    config = (
        _config(ns, endpoint, create_topic=True, topic_partitions=HARNESS.partitions)
        if creates
        else _config(ns, endpoint)
    )
    (acl,) = [a for a in writer_acls(config) if a.name == left_out]
    HARNESS.grant(config, leave_out=left_out)
    batches = _batches()
    driver = SparkOrderDriver(ns.path / "checkpoint", VARIANT[strategy], config, KafkaSink, APP)
    try:
        err = driver.fail(batches, PermissionDeniedError)
        assert isinstance(err, PermissionDeniedError) and err.permission == acl.permission, err
        assert err.fix and acl.command(f"User:{endpoint.writer}") in err.fix
        assert_secret_free(err, [endpoint.writer_password])
        if creates:
            assert HARNESS.topic(ns) not in HARNESS.admin().list_topics()
        else:
            assert HARNESS.read_committed(ns) == []  # also under idempotent: fence proves the progress topic writable

        HARNESS.allow([acl.acl(f"User:{endpoint.writer}")], f"User:{endpoint.writer}")
        driver.restart()
        driver.run(batches)
    finally:
        driver.close()
    expected = [r for b in batches for r in b.rows]
    if not VARIANT[strategy].transactional:  # keyed: once per key
        expected = list({r["id"]: r for r in expected}.values())
    assert _canon(HARNESS.read_committed(ns)) == _canon(expected)


def test_the_documented_acls_are_enough_for_every_strategy(ns: Namespace, endpoint: SecureKafkaEndpoint) -> None:
    """With exactly its ACLs (SCRAM-SHA-512 here, PLAIN in the next run), the writer runs every strategy."""
    _topic(ns)
    expected: list[dict[str, Any]] = []
    for n, (strategy, mechanism) in enumerate([("2pc", "SCRAM-SHA-512"), ("txid-check", "PLAIN")]):
        config = _config(ns, endpoint, producer_options={"sasl_mechanism": mechanism})
        HARNESS.grant(config)
        batches = [MemoryBatch(make_rows(10 * n + b), participants=2) for b in range(2)]
        driver = SparkOrderDriver(ns.path / strategy, VARIANT[strategy], config, KafkaSink, f"{APP}_{n}")
        try:
            driver.run(batches)
        finally:
            driver.close()
        expected += [r for b in batches for r in b.rows]
    assert _canon(HARNESS.read_committed(ns)) == _canon(expected)


# -- credentials and TLS ----------------------------------------------------------------------------------------

WRONG = "not-the-password-42"


def _mismatch(endpoint: SecureKafkaEndpoint, stack: list[FaultProxy]) -> str:
    """A bootstrap address on another loopback address: the certificate names 127.0.0.1 and localhost only."""
    host, _, port = endpoint.bootstrap_servers.rpartition(":")
    proxy = FaultProxy(host, int(port), listen_host="127.0.0.2").start()
    stack.append(proxy)
    return f"127.0.0.2:{proxy.port}"


BAD: dict[str, tuple[type[EosinkError], Callable[..., tuple[str | None, dict[str, Any]]]]] = {
    "wrong password": (AuthenticationError, lambda ep, tmp, stack: (None, {"sasl_plain_password": WRONG})),
    "untrusted certificate": (
        TlsError,
        lambda ep, tmp, stack: (None, {"ssl_cafile": str(TestCA("untrusted").write_ca(tmp / "untrusted.pem"))}),
    ),
    "host name mismatch": (TlsError, lambda ep, tmp, stack: (_mismatch(ep, stack), {})),
    "TLS off": (TlsError, lambda ep, tmp, stack: (None, {"security_protocol": "SASL_PLAINTEXT"})),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_credentials_and_tls_are_typed_errors_without_the_secret(
    ns: Namespace,
    endpoint: SecureKafkaEndpoint,
    case: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    _topic(ns)
    HARNESS.grant(_config(ns, endpoint))
    expected, spoil = BAD[case]
    proxies: list[FaultProxy] = []
    try:
        bootstrap, options = spoil(endpoint, ns.path, proxies)
        if options.get("security_protocol") == "SASL_PLAINTEXT":
            options = {**{k: None for k in ("ssl_cafile", "ssl_check_hostname")}, **options}
        config = _config(ns, endpoint, producer_options=options)
        clean = {k: v for k, v in config.producer_options.items() if v is not None}
        config = KafkaConfig(
            bootstrap or endpoint.bootstrap_servers,
            topic=config.topic,
            value_format="json",
            progress_topic=config.progress_topic,
            transactional_id_prefix=config.transactional_id_prefix,
            producer_options=clean,
        )
        driver = SparkOrderDriver(ns.path / "checkpoint", VARIANT["2pc"], config, KafkaSink, APP)
        try:
            err = driver.fail(_batches(), expected)
        finally:
            driver.close()
    finally:
        for proxy in proxies:
            proxy.close()
    assert err.fix
    out, errs = capfd.readouterr()
    secrets = [endpoint.writer_password, endpoint.admin_password, WRONG]
    for text in (out, errs, caplog.text, repr(config)):
        assert_secret_free(text, secrets)
    assert_secret_free(err, secrets)
    assert HARNESS.read_committed(ns) == []


# -- operations as the writer -----------------------------------------------------------------------------------


def test_status_and_recover_as_the_writer(ns: Namespace, endpoint: SecureKafkaEndpoint) -> None:
    """A 2pc batch left prepared by a dead driver: ``eosink status`` (as the writer, over SASL_SSL) shows it in
    doubt, ``eosink recover --yes`` commits it (Spark's commit log holds it), then status is clean."""
    _topic(ns)
    config = _config(ns, endpoint)
    HARNESS.grant(config)
    batches = _batches()
    driver = SparkOrderDriver(ns.path / "checkpoint", VARIANT["2pc"], config, KafkaSink, APP)
    leave_in_doubt(driver, batches[0])
    where = [
        "--sink", "kafka", "--bootstrap-servers", endpoint.bootstrap_servers, "--topic", HARNESS.topic(ns),
        "--progress-topic", config.progress_topic, "--transactional-id-prefix", config.transactional_id_prefix,
        "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", endpoint.writer,
        "--ssl-cafile", endpoint.ca,
    ]  # fmt: skip
    env = {**os.environ, "EOSINK_KAFKA_SASL_PASSWORD": endpoint.writer_password}
    status_and_recover(where, env, str(driver.ckpt.root), APP, [endpoint.writer_password])
    assert _canon(HARNESS.read_committed(ns)) == _canon(batches[0].rows)
