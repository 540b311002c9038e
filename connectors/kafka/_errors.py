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
from eosink.connectors.kafka.grants import Acl, writer_acls
from eosink.errors import (
    AuthenticationError,
    BadRecordError,
    ConfigurationError,
    EosinkError,
    FencedError,
    PermissionDeniedError,
    TransientError,
)

__all__ = ["permission_denied", "principal", "translate", "translated"]


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
        return AuthenticationError(
            f"{where}: the broker refused the credentials of {principal(config)} ({detail}).",
            "Check sasl_mechanism, sasl_plain_username and sasl_plain_password in producer_options.",
        )
    if isinstance(exc, e.AuthorizationError):
        return permission_denied(config, where, detail, exc)
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
    if isinstance(exc, e.KafkaTimeoutError) and "bootstrap" in str(exc).lower():
        from eosink.connectors.kafka._probe import diagnose

        servers = config.bootstrap_servers
        found = diagnose(servers if isinstance(servers, str) else ",".join(servers), config.producer_options)
        if found is not None:  # not an outage: TLS or credentials (kafka-python answers both with a timeout)
            return type(found)(f"{what}: {found.problem}", found.fix)
    if isinstance(exc, e.KafkaTimeoutError | e.KafkaConnectionError | e.NodeNotReadyError | OSError) or getattr(
        exc, "retriable", False
    ):
        return TransientError(
            f"{where} failed: the broker did not answer in time or the connection broke ({detail}).",
            f"Check that Kafka at {config.bootstrap_servers} is up and reachable; eosink retries.",
        )
    return TransientError(f"{where} failed: {detail}.", "Retry; if it persists, read the broker's log.")


def principal(config: KafkaConfig) -> str:
    """The writer's principal as ACLs name it (``User:<sasl user>``), or a placeholder."""
    user = config.producer_options.get("sasl_plain_username")
    return f"User:{user}" if user else "the writer's principal"


def permission_denied(
    config: KafkaConfig, where: str, detail: str, exc: BaseException | None = None, *, topic: str | None = None
) -> PermissionDeniedError:
    """The error for a refused request: the ACLs on what the broker refused, as ``kafka-acls.sh`` arguments."""
    import kafka.errors as e

    acls = writer_acls(config)
    chosen: list[Acl] = []
    if isinstance(exc, e.TransactionalIdAuthorizationFailedError):
        chosen = [a for a in acls if a.resource == "TransactionalId"]
    elif isinstance(exc, e.TopicAuthorizationFailedError) or topic is not None:
        operation = "Read" if "Fetch" in detail else "Create" if "CreateTopics" in detail else "Write"
        chosen = [
            a
            for a in acls
            if a.resource == "Topic"
            and (a.resource_name == topic or repr(a.resource_name) in detail or f"{a.resource_name}/" in detail)
            and a.operation == operation
        ]
    chosen = chosen or acls
    who = principal(config)
    grants = "; ".join(f"kafka-acls.sh --bootstrap-server ... {a.command(who)}" for a in chosen)
    return PermissionDeniedError(
        f"{where} was refused: {who} lacks {' and '.join(a.permission for a in chosen)} ({detail}).",
        f"As the cluster's administrator, allow it: {grants} (the connector's docs list every ACL and why; then "
        "restart the query).",
        permission=" and ".join(a.permission for a in chosen),
    )
