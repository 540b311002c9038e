"""The Kafka connector's one error translator: kafka-python's errors into eosink's error tree.

An unreachable or timing-out broker is a TransientError (retry); refused credentials, missing
ACLs, a topic that does not exist and a transaction timeout above the broker's maximum are
ConfigurationErrors (fix, then restart); a record the broker refuses is a BadRecordError; a
producer fenced by a newer one is a FencedError. Secret settings never reach the text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from eosink.connectors.kafka.config import KafkaConfig
from eosink.errors import BadRecordError, ConfigurationError, EosinkError, FencedError, TransientError

__all__ = ["translate", "translated"]


@contextmanager
def translated(config: KafkaConfig, what: str, on_error: Callable[[], None] | None = None) -> Iterator[None]:
    """Raise kafka-python errors of the block as eosink errors (:func:`translate`); ``on_error`` runs first."""
    from kafka.errors import KafkaError

    try:
        yield
    except (KafkaError, OSError) as exc:
        if on_error is not None:
            on_error()
        config.scrub_chain(exc)
        raise translate(config, exc, what) from None


def translate(config: KafkaConfig, exc: BaseException, what: str) -> EosinkError:
    """The eosink error for ``exc``, raised while doing ``what``."""
    import kafka.errors as e

    detail = config.scrub(f"{type(exc).__name__}: {str(exc).strip() or 'no detail'}")
    where = f"{what} on Kafka at {config.bootstrap_servers}"
    if isinstance(exc, e.ProducerFencedError | e.InvalidProducerEpochError):
        return FencedError(
            f"{where}: a newer producer with the same transactional id took over ({detail}).",
            "Stop this older writer: a newer driver (or task attempt) owns its work now.",
        )
    if isinstance(exc, e.SaslAuthenticationFailedError):
        return ConfigurationError(
            f"{where}: the broker refused the credentials ({detail}).",
            "Check sasl_mechanism, sasl_plain_username and sasl_plain_password in producer_options.",
        )
    if isinstance(exc, e.TransactionalIdAuthorizationFailedError):
        return ConfigurationError(
            f"{where}: writing transactions was refused ({detail}).",
            f"Grant the principal WRITE and DESCRIBE on transactional ids with the prefix "
            f"{config.transactional_id_prefix!r}.",
        )
    if isinstance(exc, e.AuthorizationError):
        return ConfigurationError(
            f"{where} was refused ({detail}).",
            f"Grant the principal WRITE and DESCRIBE on the sink's topics and on {config.progress_topic!r}, "
            "and DESCRIBE on the cluster (to list transactions).",
        )
    if isinstance(exc, e.InvalidTransactionTimeoutError):
        return ConfigurationError(
            f"{where}: transaction_timeout_ms={config.transaction_timeout_ms} is above the broker's "
            f"transaction.max.timeout.ms ({detail}).",
            "Lower KafkaConfig(transaction_timeout_ms=...) or raise transaction.max.timeout.ms on the brokers.",
        )
    if isinstance(exc, e.MessageSizeTooLargeError | e.RecordListTooLargeError):
        return BadRecordError(
            f"{where}: a record is larger than the broker or producer accepts ({detail}).",
            "Make the records smaller, or raise the topic's max.message.bytes and the producer's max_request_size.",
        )
    if isinstance(exc, e.InvalidTopicError):
        return ConfigurationError(f"{where}: {detail}.", "Use a valid topic name.")
    if isinstance(exc, e.UnknownTopicOrPartitionError):
        return ConfigurationError(
            f"{where}: a topic or partition does not exist ({detail}).",
            "Create the topic first (or pass KafkaConfig(create_topic=True)), and use partition numbers below its "
            "partition count.",
        )
    if isinstance(exc, e.KafkaConfigurationError | e.IncompatibleBrokerVersion | e.UnsupportedVersionError):
        return ConfigurationError(f"{where}: {detail}.", "Check producer_options and the broker's version (3.0+).")
    if isinstance(exc, e.KafkaTimeoutError | e.KafkaConnectionError | e.NodeNotReadyError | OSError) or getattr(
        exc, "retriable", False
    ):
        return TransientError(
            f"{where} failed: the broker did not answer in time or the connection broke ({detail}).",
            f"Check that Kafka at {config.bootstrap_servers} is up and reachable; eosink retries.",
        )
    return TransientError(f"{where} failed: {detail}.", "Retry; if it persists, read the broker's log.")
