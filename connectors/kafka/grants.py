"""What a Kafka writer must be allowed, as data: the docs' table, the error's fix and the tests read it.

:func:`writer_acls` lists the least privilege for one sink configuration, as ACLs for
``StandardAuthorizer`` (or any authorizer) with no default allow. Each :class:`Acl` says what it
is on and why, renders as the ``kafka-acls.sh`` arguments an administrator runs, and becomes a
kafka-python ``ACL`` for tests that create it. ``docs/connectors/kafka.md`` shows
:func:`acls_table`; a unit test keeps the two equal, and the secured tests grant exactly these,
then take each away in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eosink.connectors.kafka.config import KafkaConfig

__all__ = ["Acl", "acls_table", "documented_acls", "writer_acls"]


@dataclass(frozen=True)
class Acl:
    """One ALLOW ACL the writer's principal needs."""

    name: str
    """A short, stable name (``topic-write``): what tests and errors call it."""
    operation: str
    """``Write``, ``Read``, ``Create``, ... (Kafka's ACL operation)."""
    resource: str
    """``Topic``, ``TransactionalId`` or ``Cluster``."""
    resource_name: str
    prefixed: bool
    """A ``PREFIXED`` resource pattern (else ``LITERAL``)."""
    why: str
    when: str

    @property
    def permission(self) -> str:
        """As an administrator says it: ``Write on Topic 'payments'``."""
        kind = " prefixed by" if self.prefixed else ""
        return f"{self.operation} on {self.resource}{kind} {self.resource_name!r}"

    def command(self, principal: str) -> str:
        """The ``kafka-acls.sh`` arguments that grant it to ``principal`` (``User:writer``)."""
        flag = {"Topic": "--topic", "TransactionalId": "--transactional-id", "Cluster": "--cluster"}[self.resource]
        target = flag if self.resource == "Cluster" else f"{flag} {self.resource_name}"
        pattern = " --resource-pattern-type prefixed" if self.prefixed else ""
        return f"--add --allow-principal {principal} --operation {self.operation} {target}{pattern}"

    def acl(self, principal: str) -> Any:
        """This ACL for ``principal`` as kafka-python's ``ACL`` (for ``create_acls`` / ``delete_acls``)."""
        from kafka.admin import (
            ACL,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePattern,
            ResourceType,
        )

        kinds = {"Topic": ResourceType.TOPIC, "TransactionalId": ResourceType.TRANSACTIONAL_ID}
        kinds["Cluster"] = ResourceType.CLUSTER
        pattern = ResourcePattern(
            kinds[self.resource],
            self.resource_name,
            ACLResourcePatternType.PREFIXED if self.prefixed else ACLResourcePatternType.LITERAL,
        )
        operation = ACLOperation[self.operation.upper().replace("DESCRIBECONFIGS", "DESCRIBE_CONFIGS")]
        return ACL(principal, "*", operation, ACLPermissionType.ALLOW, pattern)


def writer_acls(config: KafkaConfig) -> list[Acl]:
    """The least privilege for a writer of ``config``."""
    topic = config.topic or "<topic>"
    prefix = config.transactional_id_prefix
    progress = config.progress_topic
    acls = [
        Acl("topic-write", "Write", "Topic", topic, False, "producing a batch's records", "always"),
        Acl(
            "progress-write",
            "Write",
            "Topic",
            progress,
            False,
            "a batch's bundle and the markers of its open transactions",
            "always",
        ),
        Acl(
            "progress-read",
            "Read",
            "Topic",
            progress,
            False,
            "reading the last bundle and the markers back (recovery, commit status)",
            "always",
        ),
        Acl(
            "txid-write",
            "Write",
            "TransactionalId",
            prefix,
            True,
            "the fence, bundle and participants' transactions (their ids all start with the prefix)",
            "always",
        ),
        Acl(
            "progress-create",
            "Create",
            "Topic",
            progress,
            False,
            "creating the progress topic at setup (not needed once it exists)",
            "the progress topic does not exist yet",
        ),
    ]
    if config.create_topic:
        acls.append(
            Acl("topic-create", "Create", "Topic", topic, False, "creating the target topic", "create_topic=True")
        )
    return acls


def documented_acls() -> list[Acl]:
    """Every ACL of every configuration, for topic ``payments``, the default progress topic and prefix."""
    found: dict[str, Acl] = {}
    for create in (False, True):
        for acl in writer_acls(KafkaConfig("broker:9092", topic="payments", create_topic=create)):
            found.setdefault(acl.name, acl)
    return list(found.values())


def acls_table(acls: list[Acl], principal: str = "User:writer") -> str:
    """The ACLs as the Markdown table the connector's page shows."""
    lines = ["| `kafka-acls.sh` arguments | needed | what the sink does with it |", "|---|---|---|"]
    lines += [f"| `{a.command(principal)}` | {a.when} | {a.why} |" for a in acls]
    return "\n".join(lines)
