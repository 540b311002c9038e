"""Bad settings against the real MinIO: a typed error that names the problem and the fix, no secret in it."""

from __future__ import annotations

import dataclasses

import pytest

from eosink.connectors.s3 import S3Config, S3Sink
from eosink.connectors.s3.admin import S3Admin
from eosink.errors import ConfigurationError

from .conftest import HARNESS


def _config(**options: object) -> S3Config:
    return dataclasses.replace(HARNESS.config("s3t-errors"), **options)


@pytest.mark.parametrize("where", ["setup", "status"])
def test_a_missing_bucket_is_a_configuration_error_naming_it(where: str) -> None:
    config = _config(bucket="eosink-no-such-bucket")
    with pytest.raises(ConfigurationError) as info:
        if where == "setup":
            S3Sink(config).setup("app")
        else:
            S3Admin(config).status()
    assert "eosink-no-such-bucket" in str(info.value) and "bucket does not exist" in str(info.value)
    assert "Create the bucket" in info.value.fix


def test_wrong_credentials_are_a_configuration_error_without_the_secret() -> None:
    secret = "not-the-secret-0123456789"
    config = _config(secret_access_key=secret)
    with pytest.raises(ConfigurationError) as info:
        S3Sink(config).setup("app")
    text = f"{info.value} {info.value.fix} {info.value!r} {config!r}"
    assert "credentials" in text and secret not in text
