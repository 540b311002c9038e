"""Keep kafka-python's own log records free of secrets.

kafka-python's admin client logs its whole configuration at DEBUG when it starts, SASL password
included. A filter on that logger replaces every secret setting's value before any handler sees
the record; it is installed once, when the connector is imported, and covers every admin client
of the process (the sink's, ``eosink status``'s and a test's).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from eosink.connectors.kafka.config import SECRET_OPTIONS

__all__ = ["install"]

_LOGGERS = ("kafka.admin.client", "kafka.producer.kafka", "kafka.consumer.group")


class _RedactSecrets(logging.Filter):
    """Replaces the values of :data:`~eosink.connectors.kafka.config.SECRET_OPTIONS` in a record's mapping args."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping):
            record.args = _redacted(args)
        elif isinstance(args, tuple) and any(isinstance(a, Mapping) for a in args):
            record.args = tuple(_redacted(a) if isinstance(a, Mapping) else a for a in args)
        return True


def _redacted(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: "***" if k in SECRET_OPTIONS and v is not None else v for k, v in options.items()}


def install() -> None:
    """Add the filter to kafka-python's loggers that print configurations (once)."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactSecrets) for f in logger.filters):
            logger.addFilter(_RedactSecrets())
