"""KafkaConfig: everything a KafkaSink needs, as one frozen, picklable value.

Producer settings pass through (``producer_options``: batching, TLS, SASL, timeouts);
the security settings among them reach the sink's admin and consumer clients too. A few are
the sink's own business and refused with the reason (the transactional id, idempotence,
serializers), and ``acks`` must be ``all``: a transaction is only as durable as its acks.
Secret settings (``sasl_plain_password``, ``ssl_password``, a token provider, an SSL context)
never appear in ``repr``/``str`` and are scrubbed from error text (:meth:`KafkaConfig.scrub`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

from eosink.errors import ConfigurationError

__all__ = ["DEFAULT_PROGRESS_TOPIC", "KafkaConfig", "check_topic_name"]

DEFAULT_PROGRESS_TOPIC = "eosink_progress"
"""Where the sink keeps bundles and the markers of open transactions (created by ``setup``)."""

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PREFIX = re.compile(r"^[A-Za-z0-9._-]{1,64}$")

#: Settings that hold secrets: never printed.
SECRET_OPTIONS = frozenset({"sasl_plain_password", "ssl_password", "sasl_oauth_token_provider", "ssl_context"})

#: The sink sets these itself; each with the reason a user may not.
_OWN_OPTIONS = {
    "bootstrap_servers": "pass it as KafkaConfig(bootstrap_servers=...)",
    "transactional_id": "the sink names its transactions (KafkaConfig.transactional_id_prefix sets their prefix)",
    "transaction_timeout_ms": "pass it as KafkaConfig(transaction_timeout_ms=...)",
    "enable_idempotence": "exactly-once needs the idempotent producer; the sink always enables it",
    "key_serializer": "the sink turns the key column into bytes itself",
    "value_serializer": "the sink turns the value column into bytes itself (value_format='json' for rows)",
    "partitioner": "rows choose their partition with a partition column",
    "compression_type": "pass it as KafkaConfig(compression=...): none, gzip, snappy, lz4 or zstd",
}

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
"""Record batch codecs: those of Spark's Kafka sink (``kafka.compression.type``)."""

_CODEC_PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}

#: Client settings shared by the producer, the consumer and the admin client (security, network).
SHARED_OPTIONS = frozenset(
    {
        "client_dns_lookup",
        "connections_max_idle_ms",
        "metadata_max_age_ms",
        "reconnect_backoff_ms",
        "reconnect_backoff_max_ms",
        "request_timeout_ms",
        "retry_backoff_ms",
        "security_protocol",
        "ssl_context",
        "ssl_check_hostname",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_crlfile",
        "ssl_password",
        "ssl_ciphers",
        "api_version",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_kerberos_name",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
        "proxy_url",
        "socket_options",
        "bootstrap_timeout_ms",
        "send_buffer_bytes",
        "receive_buffer_bytes",
    }
)


def _take_turns(kwargs: dict[str, Any]) -> None:
    """Bootstrap with :class:`~eosink.connectors.kafka._bootstrap.TurnTakingClient` unless told otherwise."""
    from eosink.connectors.kafka._bootstrap import TurnTakingClient

    kwargs.setdefault("kafka_client", TurnTakingClient)


_QUICK = {"retry_backoff_ms": 10, "bootstrap_timeout_ms": 10_000}
"""Defaults that keep eosink's short-lived clients quick: a 10 ms retry backoff (initialising a
transactional producer waits for it between its coordinator lookup and InitProducerId; kafka-python's
100 ms default makes that 250 ms), and giving up on unreachable brokers after 10 s (default 30 s)."""


TOPIC_NAME_RULE = "Use 1-249 characters of ASCII letters, digits, '.', '_' and '-' (and not '.' or '..')."


def is_topic_name(name: object) -> TypeGuard[str]:
    """Whether Kafka accepts ``name`` as a topic name."""
    return isinstance(name, str) and bool(_TOPIC_NAME.match(name)) and name not in (".", "..")


def check_topic_name(name: object, what: str = "topic") -> str:
    """``name`` if Kafka accepts it as a topic name; ConfigurationError naming the rule otherwise."""
    if not is_topic_name(name):
        raise ConfigurationError(
            f"The {what} name {name!r} is not a valid Kafka topic name.",
            TOPIC_NAME_RULE,
        )
    return name


@dataclass(frozen=True)
class KafkaConfig:
    """Where and how a :class:`~eosink.connectors.kafka.KafkaSink` writes.

    ``topic`` is the records' topic unless the rows carry a ``topic`` column. ``value_format``
    ``"raw"`` writes the ``value`` column as is (string or binary); ``"json"`` writes every other
    column as one JSON object per record (``key``, ``headers``, ``topic``, ``partition`` stay
    what they are in Spark's Kafka sink). ``transaction_timeout_ms`` bounds how long a prepared
    batch may wait for its commit (two-phase commit keeps each participant's transaction open
    until Spark's checkpoint holds the batch): the broker aborts a transaction older than that,
    and must allow it (``transaction.max.timeout.ms``, checked by ``setup``). ``compression`` is
    the record batches' codec, as Spark's Kafka sink offers them.
    """

    bootstrap_servers: str | Sequence[str]
    topic: str | None = None
    value_format: Literal["raw", "json"] = "raw"
    progress_topic: str = DEFAULT_PROGRESS_TOPIC
    transactional_id_prefix: str = "eosink"
    transaction_timeout_ms: int = 900_000
    create_topic: bool = False
    topic_partitions: int = 1
    max_record_bytes: int | None = None
    compression: Literal["none", "gzip", "snappy", "lz4", "zstd"] = "none"
    producer_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        servers = self.bootstrap_servers
        listed = [s.strip() for s in (servers.split(",") if isinstance(servers, str) else servers) if s.strip()]
        if not listed or not all(isinstance(s, str) for s in listed):
            raise ConfigurationError(
                "KafkaConfig needs bootstrap_servers.", "Pass bootstrap_servers='host:port' (or a list of them)."
            )
        object.__setattr__(self, "bootstrap_servers", ",".join(listed))
        if self.topic is not None:
            check_topic_name(self.topic)
        check_topic_name(self.progress_topic, "progress topic")
        if self.value_format not in ("raw", "json"):
            raise ConfigurationError(
                f"value_format={self.value_format!r} is unknown.", "Use 'raw' (the value column) or 'json'."
            )
        if not _PREFIX.match(self.transactional_id_prefix or ""):
            raise ConfigurationError(
                f"transactional_id_prefix={self.transactional_id_prefix!r} is not usable in transactional ids.",
                "Use 1-64 characters of ASCII letters, digits, '.', '_' and '-'.",
            )
        if not isinstance(self.transaction_timeout_ms, int) or self.transaction_timeout_ms < 1000:
            raise ConfigurationError(
                f"transaction_timeout_ms={self.transaction_timeout_ms!r} is not a number of milliseconds >= 1000.",
                "Give how long a prepared batch may wait for its commit, e.g. 900000 (15 minutes).",
            )
        if not isinstance(self.topic_partitions, int) or self.topic_partitions < 1:
            raise ConfigurationError(
                f"topic_partitions={self.topic_partitions!r} is not a positive number.", "Pass topic_partitions=1."
            )
        if self.max_record_bytes is not None and (
            not isinstance(self.max_record_bytes, int) or self.max_record_bytes < 1
        ):
            raise ConfigurationError(
                f"max_record_bytes={self.max_record_bytes!r} is not a positive number of bytes.",
                "Leave it None (the producer's max_request_size) or pass a size in bytes.",
            )
        if self.compression not in COMPRESSIONS:
            raise ConfigurationError(
                f"compression={self.compression!r} is not a codec Kafka knows.",
                f"Use one of {', '.join(COMPRESSIONS)}.",
            )
        object.__setattr__(self, "producer_options", dict(self.producer_options))
        self._check_options()

    def _check_options(self) -> None:
        known = _producer_settings()
        for name, _value in self.producer_options.items():
            if name in _OWN_OPTIONS:
                raise ConfigurationError(
                    f"producer_options may not set {name!r}: {_OWN_OPTIONS[name]}.", f"Remove {name!r}."
                )
            if name not in known:
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigurationError(
                    f"producer_options has an unknown setting {name!r}{hint}.",
                    "Use kafka-python's KafkaProducer setting names (acks, linger_ms, batch_size, "
                    "security_protocol, sasl_mechanism, ...).",
                )
        acks = self.producer_options.get("acks", "all")
        if acks not in ("all", -1):
            raise ConfigurationError(
                f"producer_options sets acks={acks!r}; transactions need acks='all'.",
                "Remove acks (the sink uses 'all'): with fewer acks a committed record can be lost.",
            )

    # -- what the clients get -----------------------------------------------------------------

    def producer_kwargs(self, **extra: Any) -> dict[str, Any]:
        """KafkaProducer keyword arguments: the pass-through settings, then the sink's own."""
        kwargs: dict[str, Any] = {"client_id": "eosink", "linger_ms": 5, "batch_size": 262_144, **_QUICK}
        kwargs.update(self.producer_options)
        kwargs.update(bootstrap_servers=self.bootstrap_servers, acks="all", enable_idempotence=True)
        kwargs.update(compression_type=check_codec(self.compression))
        kwargs.update(extra)
        _take_turns(kwargs)
        if kwargs.get("transactional_id") is not None:  # every transactional producer: the brokers may allow less
            kwargs.setdefault("transaction_timeout_ms", self.transaction_timeout_ms)  # than kafka-python's 60 s
        return kwargs

    def client_kwargs(self, **extra: Any) -> dict[str, Any]:
        """Admin client and consumer keyword arguments: the shared (security, network) settings."""
        kwargs: dict[str, Any] = {"client_id": "eosink", **_QUICK}
        kwargs.update({k: v for k, v in self.producer_options.items() if k in SHARED_OPTIONS})
        kwargs.update(bootstrap_servers=self.bootstrap_servers)
        kwargs.update(extra)
        _take_turns(kwargs)
        return kwargs

    @property
    def record_limit(self) -> int:
        """The largest record (key + value + headers) a participant sends, in bytes."""
        limit = int(self.producer_options.get("max_request_size", 1_048_576))
        return min(limit, self.max_record_bytes) if self.max_record_bytes else limit

    # -- secrets ------------------------------------------------------------------------------

    def scrub(self, text: str) -> str:
        """``text`` with every secret setting's value replaced by ``***``."""
        for name in SECRET_OPTIONS:
            value = self.producer_options.get(name)
            if isinstance(value, str) and value:
                text = text.replace(value, "***")
        return text

    def scrub_chain(self, exc: BaseException | None) -> None:
        """Scrub the arguments of ``exc`` and of every exception it was raised from or during."""
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            exc.args = tuple(self.scrub(a) if isinstance(a, str) else a for a in exc.args)
            exc = exc.__cause__ or exc.__context__

    def __repr__(self) -> str:
        options = {k: ("***" if k in SECRET_OPTIONS else v) for k, v in self.producer_options.items()}
        return (
            f"KafkaConfig(bootstrap_servers={self.bootstrap_servers!r}, topic={self.topic!r}, "
            f"value_format={self.value_format!r}, progress_topic={self.progress_topic!r}, "
            f"transactional_id_prefix={self.transactional_id_prefix!r}, "
            f"transaction_timeout_ms={self.transaction_timeout_ms}, compression={self.compression!r}, "
            f"producer_options={options!r})"
        )

    __str__ = __repr__


def check_codec(compression: str) -> str | None:
    """kafka-python's ``compression_type`` for ``compression``; ConfigurationError when its library is missing."""
    if compression == "none":
        return None
    from kafka import codec

    available = {"gzip": codec.has_gzip, "snappy": codec.has_snappy, "lz4": codec.has_lz4, "zstd": codec.has_zstd}
    if not available[compression]():
        package = _CODEC_PACKAGES.get(compression, compression)
        raise ConfigurationError(
            f"compression={compression!r} needs the {package} package, which this Python does not have.",
            f"pip install 'eosink[kafka]' (it brings every codec), or pip install {package}, on the driver and "
            "every executor.",
        )
    return compression


def _producer_settings() -> frozenset[str]:
    try:
        from kafka import KafkaProducer
    except ImportError as exc:
        raise ConfigurationError(
            f"The Kafka connector needs kafka-python: {exc}.", "pip install 'eosink[kafka]'."
        ) from None
    return frozenset(KafkaProducer.DEFAULT_CONFIG)
