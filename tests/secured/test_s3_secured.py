"""S3 secured: MinIO over TLS only, written by a user whose policy allows only the documented actions.

A wrong secret, an untrusted certificate, a host name mismatch and plain HTTP to the TLS listener are each a
typed error (never a retried outage), with no secret in the error, the logs or the output.

Against ``eosink services up minio-secure`` (:mod:`eosink.services.minio_secure`): the contract suite's cases
that need no fault proxy as the writer user (never the root credentials), and each documented action
(:func:`eosink.connectors.s3.grants.writer_actions`) left out of the writer's policy in turn: the query stops with
a :class:`PermissionDeniedError` naming it and nothing is visible; allowed again, a restart lands every batch once.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.s3 import S3Sink
from eosink.connectors.s3 import sink as s3_sink
from eosink.connectors.s3.grants import writer_actions
from eosink.connectors.s3.testing import SecureS3Harness
from eosink.contracts import contract_tests
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, canon, make_rows
from eosink.contracts.secrets import assert_secret_free
from eosink.errors import AuthenticationError, EosinkError, PermissionDeniedError, TlsError
from eosink.services._tls import TestCA
from eosink.services.proxy import FaultProxy

from ._operations import leave_in_doubt, other_host_name, status_and_recover

HARNESS = SecureS3Harness()
TestSecureS3Contract = contract_tests(HARNESS, name="TestSecureS3Contract")

APP = "app_secured"
VARIANT = {v.id: v for v in VARIANTS}


def _die_before_the_2pc_commit(driver: SparkOrderDriver[Any], batch: MemoryBatch) -> None:
    """Batch 0 prepared and in Spark's commit log, then the driver dies before its 2pc commit: the next start
    must find out whether each prepared upload is still there (ListParts) before it commits the batch."""
    driver.ckpt.write_offsets(0)
    driver.coordinator.process(0, batch)
    driver.ckpt.write_commit(0)
    driver.restart()


# The path on which each action is needed: a 2pc batch with a speculative second attempt of one task (its
# prepared upload is not in the batch and is aborted); for listing an upload's parts, the recovery of a prepared
# batch.


@pytest.mark.parametrize("left_out", [a.action for a in writer_actions()])
def test_each_documented_action_is_needed(tmp_path: Path, left_out: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``left_out`` in the writer's policy the query stops with PermissionDeniedError naming it, before
    anything is visible; with the whole policy, a restart from the same checkpoint lands every batch once.
    (One user: the walk's cases run one at a time, each restoring the whole policy at its end.) Each driver is
    a new process as far as setup knows: it probes the store again (the probe's DELETE needs s3:DeleteObject,
    which otherwise only the folding of old markers uses, and a refused fold only warns)."""
    monkeypatch.setattr(s3_sink, "_PROBED", set())
    prefix = f"walk/{uuid.uuid4().hex[:10]}"
    config = HARNESS.config(prefix)
    endpoint = HARNESS.endpoint()
    HARNESS.allow(prefix=prefix)
    batches = [MemoryBatch(make_rows(b), participants=2, speculative={0: 1}) for b in range(4)]
    driver = SparkOrderDriver(tmp_path, VARIANT["2pc"], config, S3Sink, APP)
    try:
        if left_out == "s3:ListMultipartUploadParts":
            _die_before_the_2pc_commit(driver, batches[0])
        HARNESS.allow(without=left_out, prefix=prefix)
        try:
            err = driver.fail(batches, PermissionDeniedError)
            assert isinstance(err, PermissionDeniedError) and err.permission == left_out, err
            assert err.fix and left_out in err.fix, err.fix
            assert_secret_free(err, [endpoint.writer_secret, endpoint.secret_key])
            assert HARNESS.read_as_admin(prefix) == []
        finally:
            HARNESS.allow(prefix=prefix)
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


BAD: dict[str, tuple[type[EosinkError], Callable[[Path, list[FaultProxy]], dict[str, Any]]]] = {
    "wrong secret": (AuthenticationError, lambda tmp, proxies: {"secret_access_key": WRONG}),
    "untrusted certificate": (
        TlsError,
        lambda tmp, proxies: {"ca_bundle": str(TestCA("untrusted").write_ca(tmp / "untrusted.pem"))},
    ),
    "host name mismatch": (TlsError, lambda tmp, proxies: _mismatch(proxies)),
    "TLS off": (
        TlsError,
        lambda tmp, proxies: {"endpoint_url": HARNESS.endpoint().endpoint_url.replace("https://", "http://")},
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_credentials_and_tls_are_typed_errors_without_the_secret(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    expected, spoil = BAD[case]
    prefix = f"bad/{uuid.uuid4().hex[:10]}"
    HARNESS.allow(prefix=prefix)
    proxies: list[FaultProxy] = []
    try:
        config = HARNESS.config(prefix, **spoil(tmp_path, proxies))
        driver = SparkOrderDriver(tmp_path / "checkpoint", VARIANT["2pc"], config, S3Sink, APP)
        try:
            err = driver.fail([MemoryBatch(make_rows(0), participants=2)], expected)
        finally:
            driver.close()
    finally:
        for proxy in proxies:
            proxy.close()
        HARNESS.allow()
    assert err.fix
    endpoint = HARNESS.endpoint()
    secrets = [endpoint.writer_secret, endpoint.secret_key, WRONG]
    out, errs = capfd.readouterr()
    for text in (out, errs, caplog.text, repr(config)):
        assert_secret_free(text, secrets)
    assert_secret_free(err, secrets)
    assert HARNESS.read_as_admin(prefix) == []


# -- operations as the writer -----------------------------------------------------------------------------------


def test_status_and_recover_as_the_writer(tmp_path: Path) -> None:
    """A 2pc batch left prepared by a dead driver: ``eosink status`` (as the writer, over ``https://`` with
    ``--ca-bundle``) shows it in doubt, ``eosink recover --yes`` commits it, then status is clean."""
    prefix = f"{HARNESS.prefix_root}/ops-{uuid.uuid4().hex[:10]}"
    ep = HARNESS.endpoint()
    batch = MemoryBatch(make_rows(0), participants=2)
    driver = SparkOrderDriver(tmp_path, VARIANT["2pc"], HARNESS.config(prefix), S3Sink, APP)
    leave_in_doubt(driver, batch)
    where = ["--sink", "s3", "--bucket", HARNESS.bucket, "--prefix", prefix, "--endpoint-url", ep.endpoint_url]
    where += ["--region", ep.region, "--ca-bundle", ep.ca]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EOSINK_S3_", "AWS_"))}
    env.update(AWS_ACCESS_KEY_ID=ep.writer, AWS_SECRET_ACCESS_KEY=ep.writer_secret)
    status_and_recover(where, env, str(driver.ckpt.root), APP, [ep.writer_secret, ep.secret_key])
    assert canon(HARNESS.read_as_admin(prefix)) == canon(batch.rows)
