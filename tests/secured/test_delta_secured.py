"""Delta on S3 secured: MinIO over TLS only, a table written by a user allowed only the documented actions.

Against ``eosink services up minio-secure``: the contract suite's cases that need no fault proxy as the
writer (a MinIO user of its own, never the root credentials); each documented action
(:func:`eosink.connectors.delta.grants.writer_actions`) left out of the writer's policy in turn: the
query stops with a :class:`PermissionDeniedError` naming it and no reader sees a row; allowed again, a
restart lands every batch once. A wrong secret, an untrusted certificate, a host name mismatch and plain
HTTP to the TLS listener are each a typed error, with no secret in the error, the logs or the output.
delta-rs reads its CAs from ``SSL_CERT_FILE`` only (``ca_bundle`` sets it: :mod:`eosink.stores.ca_trust`),
so the untrusted-CA case runs in a process that never trusted the harness's CA.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.delta import DeltaConfig, DeltaSink
from eosink.connectors.delta import sink as delta_sink
from eosink.connectors.delta.grants import writer_actions
from eosink.connectors.delta.testing import SecureDeltaS3Harness
from eosink.contracts import contract_tests
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, canon, make_rows
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.contracts.secrets import assert_secret_free
from eosink.errors import AuthenticationError, EosinkError, PermissionDeniedError, TlsError
from eosink.services.proxy import FaultProxy

from ._operations import leave_in_doubt, other_host_name, status_and_recover

HARNESS = SecureDeltaS3Harness()
TestSecureDeltaS3Contract = contract_tests(HARNESS, name="TestSecureDeltaS3Contract")

APP = "app_secured"
VARIANT = {v.id: v for v in VARIANTS}


def _sink(config: DeltaConfig) -> DeltaSink:
    sink = DeltaSink(config)
    sink.bind_schema(CONTRACT_SCHEMA)
    return sink


@pytest.mark.parametrize("left_out", [a.action for a in writer_actions()])
def test_each_documented_action_is_needed(tmp_path: Path, left_out: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``left_out`` the query stops with PermissionDeniedError naming it before any reader sees a row;
    with the whole policy, a restart from the same checkpoint lands every batch once. Each driver is a new
    process as far as setup knows: it probes the store's create-only writes again (the probe's DELETE is
    where s3:DeleteObject is first needed). A speculative second attempt of a task exercises the removal
    of files no commit names."""
    monkeypatch.setattr(delta_sink, "_PROBED", set())
    prefix = f"{HARNESS.prefix_root}/walk-{uuid.uuid4().hex[:10]}"
    config = HARNESS.config(prefix)
    batches = [MemoryBatch(make_rows(b), participants=2, speculative={0: 1}) for b in range(3)]
    driver = SparkOrderDriver(tmp_path, VARIANT["2pc"], config, _sink, APP)
    try:
        HARNESS.allow(without=left_out, prefix=prefix)
        try:
            err = driver.fail(batches, PermissionDeniedError)
            assert isinstance(err, PermissionDeniedError) and err.permission == left_out, err
            assert left_out in (err.fix or "")
            assert_secret_free(err, [HARNESS.writer_secret, HARNESS.endpoint().secret_key])
            assert HARNESS.read_as_admin(prefix) == []
        finally:
            HARNESS.allow(prefix=prefix)
        monkeypatch.setattr(delta_sink, "_PROBED", set())
        driver.restart()
        driver.run(batches)
    finally:
        driver.close()
        HARNESS.allow()  # the suite's policy again
    assert canon(HARNESS.read_as_admin(prefix)) == canon([r for b in batches for r in b.rows])


# -- credentials and TLS ----------------------------------------------------------------------------------------

WRONG = "not-the-secret-42"


def _mismatch(proxies: list[FaultProxy]) -> dict[str, Any]:
    """The store reached by another loopback address: its certificate names 127.0.0.1 and localhost only."""
    return {"endpoint_url": other_host_name(HARNESS.endpoint().endpoint_url, proxies)}


BAD: dict[str, tuple[type[EosinkError], Callable[[list[FaultProxy]], dict[str, Any]]]] = {
    "wrong secret": (AuthenticationError, lambda proxies: {"secret_access_key": WRONG}),
    "host name mismatch": (TlsError, _mismatch),
    "TLS off": (
        TlsError,
        lambda proxies: {"endpoint_url": HARNESS.endpoint().endpoint_url.replace("https://", "http://")},
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_credentials_and_tls_are_typed_errors_without_the_secret(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    expected, spoil = BAD[case]
    prefix = f"{HARNESS.prefix_root}/bad-{uuid.uuid4().hex[:10]}"
    proxies: list[FaultProxy] = []
    try:
        config = HARNESS.config(prefix, max_attempts=1, **spoil(proxies))
        driver = SparkOrderDriver(tmp_path / "checkpoint", VARIANT["2pc"], config, _sink, APP)
        try:
            err = driver.fail([MemoryBatch(make_rows(0), participants=2)], expected)
        finally:
            driver.close()
    finally:
        for proxy in proxies:
            proxy.close()
    assert err.fix
    secrets = [HARNESS.writer_secret, HARNESS.endpoint().secret_key, WRONG]
    out, errs = capfd.readouterr()
    for text in (out, errs, caplog.text, repr(config)):
        assert_secret_free(text, secrets)
    assert_secret_free(err, secrets)
    assert HARNESS.read_as_admin(prefix) == []


_UNTRUSTED = """
import sys
from eosink.connectors.delta import DeltaConfig, DeltaSink
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import EosinkError
config = DeltaConfig(sys.argv[1], endpoint_url=sys.argv[2], region="us-east-1", access_key_id=sys.argv[3],
                     secret_access_key=sys.stdin.read(), ca_bundle=sys.argv[4] or None, max_attempts=1)
sink = DeltaSink(config)
sink.bind_schema(CONTRACT_SCHEMA)
try:
    sink.setup("app_secured")
except EosinkError as err:
    print(type(err).__name__, "|", err)
else:
    print("no error")
"""


@pytest.mark.parametrize("ca", ["none", "another CA"])
def test_an_untrusted_certificate_is_a_tls_error_in_a_fresh_process(tmp_path: Path, ca: str) -> None:
    """Without ``ca_bundle`` (the system's CAs) or with another CA's, setup stops with a TlsError naming the fix."""
    from eosink.services._tls import TestCA

    ep = HARNESS.endpoint()
    bundle = str(TestCA("untrusted").write_ca(tmp_path / "other.pem")) if ca == "another CA" else ""
    table = f"s3://eosink-tests/{HARNESS.prefix_root}/untrusted-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    done = subprocess.run(
        [sys.executable, "-c", _UNTRUSTED, table, ep.endpoint_url, HARNESS.writer, bundle],
        input=HARNESS.writer_secret,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    kind, _, text = done.stdout.strip().partition(" | ")
    assert kind == "TlsError", done.stdout + done.stderr
    assert "ca_bundle" in text
    assert_secret_free(done.stdout + done.stderr, [HARNESS.writer_secret, ep.secret_key])


# -- operations as the writer -----------------------------------------------------------------------------------


def test_status_and_recover_as_the_writer(tmp_path: Path) -> None:
    """A 2pc batch left prepared by a dead driver: ``eosink status`` (as the writer, over ``https://`` with
    ``--ca-bundle``, credentials from the environment) shows it in doubt, ``eosink recover --yes`` commits it,
    then status is clean and every reader sees the batch once."""
    prefix = f"{HARNESS.prefix_root}/ops-{uuid.uuid4().hex[:10]}"
    ep = HARNESS.endpoint()
    config = HARNESS.config(prefix)
    batch = MemoryBatch(make_rows(0), participants=2)
    driver = SparkOrderDriver(tmp_path, VARIANT["2pc"], config, _sink, APP)
    leave_in_doubt(driver, batch)
    where = ["--sink", "delta", "--table", config.table, "--endpoint-url", ep.endpoint_url, "--ca-bundle", ep.ca]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EOSINK_S3_", "AWS_")) and k != "SSL_CERT_FILE"}
    env.update(AWS_ACCESS_KEY_ID=HARNESS.writer, AWS_SECRET_ACCESS_KEY=HARNESS.writer_secret, AWS_REGION=ep.region)
    status_and_recover(where, env, str(driver.ckpt.root), APP, [HARNESS.writer_secret, ep.secret_key])
    assert canon(HARNESS.read_as_admin(prefix)) == canon(batch.rows)
