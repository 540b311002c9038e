"""``ca_trust`` adds a CA to what the process trusts (``SSL_CERT_FILE``) without dropping what it trusted before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eosink.errors import ConfigurationError
from eosink.stores import ca_trust


def test_trust_ca_keeps_what_was_trusted_and_adds_the_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = tmp_path / "before.pem"
    before.write_text("-----BEGIN CERTIFICATE-----\nOLD\n-----END CERTIFICATE-----\n")
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nNEW\n-----END CERTIFICATE-----\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(before))
    monkeypatch.setattr(ca_trust, "_TRUSTED", set())
    ca_trust.trust_ca(str(ca))
    bundle = Path(os.environ["SSL_CERT_FILE"]).read_text()
    assert "OLD" in bundle and "NEW" in bundle


def test_an_unreadable_or_empty_ca_bundle_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be read"):
        ca_trust.trust_ca(str(tmp_path / "missing.pem"))
    (tmp_path / "empty.pem").write_text("nothing")
    with pytest.raises(ConfigurationError, match="no PEM certificate"):
        ca_trust.trust_ca(str(tmp_path / "empty.pem"))
