"""Secrets out of text: which setting names look secret, and one scrubber for reprs, logs and errors.

A sink's configuration knows its secrets (passwords, keys, tokens, keytab paths); every message
that could carry one passes through :func:`scrub` first.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["looks_secret", "scrub"]

_SECRET_PARTS = (
    "secret",
    "token",
    "password",
    "key_id",
    "access_key",
    "account_key",
    "customer_key",
    "key_base64",
    "private_key",
    "service_account",
    "sas",
    "credential",
    "keytab",
    "key.",
)


def looks_secret(name: str) -> bool:
    """Whether a setting's name looks secret (its value is never shown): ``password``, ``*_token``,
    ``aws_secret_access_key``, ``hadoop.security.credential...``, ``*.keytab``, ``*.key.*`` and the like."""
    lowered = name.lower()
    return any(part in lowered for part in _SECRET_PARTS)


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with each of ``secrets`` (the longest first, so no part of one is left) replaced by ``***``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
