"""Kafka secured as production runs it: SASL_SSL only, SCRAM-SHA-512 (and PLAIN), ACLs with no default allow.

``eosink services up kafka-secure`` starts a second KRaft node beside the plain one:

* its one client listener speaks ``SASL_SSL``: TLS with a certificate from a CA made at start
  (:mod:`eosink.services._tls`), then SCRAM-SHA-512 or PLAIN; the controller's listener is
  internal (plaintext on 127.0.0.1, its principal ``ANONYMOUS`` a super user, as KRaft needs);
* ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: a principal may do only
  what an ACL allows;
* two users, with credentials made at start: ``admin`` (a super user, for ``setup``-like work and
  the tests' own reads) and ``writer``, who holds no ACL until a test grants it exactly
  :func:`eosink.connectors.kafka.grants.writer_acls`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eosink.services._process import Attempt, Proc, free_ports, start_on_ports
from eosink.services._tls import make_ca
from eosink.services.kafka import (
    KafkaEndpoint,
    KafkaService,
    fresh_storage,
    java_command,
    server_properties,
    start_broker,
)

__all__ = ["ADMIN", "MECHANISM", "WRITER", "SecureKafkaEndpoint", "SecureKafkaService"]

ADMIN = "admin"
WRITER = "writer"
MECHANISM = "SCRAM-SHA-512"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True)
class SecureKafkaEndpoint(KafkaEndpoint):
    """A SASL_SSL broker: the CA its certificate chains to, and the two users' credentials."""

    ca: str = ""
    admin_password: str = field(default="", repr=False)
    writer: str = WRITER
    writer_password: str = field(default="", repr=False)

    def client_options(self, user: str, password: str, mechanism: str = MECHANISM) -> dict[str, Any]:
        """kafka-python settings for ``user``: SASL_SSL, the CA, host name checked."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password,
            "ssl_cafile": self.ca,
            "ssl_check_hostname": True,
        }

    def admin_options(self) -> dict[str, Any]:
        return self.client_options(ADMIN, self.admin_password)

    def writer_options(self) -> dict[str, Any]:
        return self.client_options(self.writer, self.writer_password)

    def env(self) -> dict[str, str]:
        return {"EOSINK_SECURE_KAFKA_BOOTSTRAP": self.bootstrap_servers, "EOSINK_SECURE_KAFKA_CA": self.ca}


class SecureKafkaService(KafkaService):
    """The same Kafka build, with TLS, SASL and ACLs (see the module docstring)."""

    name = "kafka-secure"
    endpoint_type = SecureKafkaEndpoint
    override_vars: ClassVar[tuple[str, ...]] = ()

    def external(self) -> SecureKafkaEndpoint | None:
        return None  # the secured tests need the harness's own broker: they create users and ACLs

    def client_options(self, endpoint: KafkaEndpoint) -> dict[str, Any]:
        assert isinstance(endpoint, SecureKafkaEndpoint)
        return endpoint.admin_options()

    def launch(self) -> tuple[Proc, KafkaEndpoint]:
        """Format a new cluster with the two SCRAM users and start its broker on free ports."""
        config = self.run / "server.properties"
        java = java_command(self.jars, self.home)
        files = make_ca(self.run / "tls")
        keystore = self.run / "tls" / "server-keystore.pem"
        keystore.write_bytes(files.key.read_bytes() + files.cert.read_bytes())
        keystore.chmod(0o600)
        admin_password, writer_password = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
        scram = [
            arg
            for user, password in ((ADMIN, admin_password), (WRITER, writer_password))
            for arg in ("--add-scram", f"{MECHANISM}=[name={user},password={password}]")
        ]

        def start(attempt: Attempt) -> tuple[Proc, KafkaEndpoint]:
            broker_port, controller_port = attempt.ports
            log_dir = self.data / "kraft"
            settings = _secure_settings(
                broker_port, controller_port, keystore, files.ca, admin_password, writer_password
            )
            text = server_properties(broker_port, controller_port, log_dir, extra=settings)
            config.touch(mode=0o600)
            config.write_text(text)  # it holds the users' passwords (PLAIN's JAAS): 0600
            fresh_storage(java, config, self.jars, log_dir, scram)
            endpoint = SecureKafkaEndpoint(
                f"127.0.0.1:{broker_port}",
                ca=str(files.ca),
                admin_password=admin_password,
                writer_password=writer_password,
            )
            proc = start_broker(
                java,
                config,
                self.jars,
                self.log_path,
                endpoint,
                self.start_timeout_s,
                attempt,
                client=endpoint.admin_options(),
            )
            return proc, endpoint

        return start_on_ports(start, free_ports(2), log_path=self.log_path, what="secured Kafka", may_move=True)


def _secure_settings(
    port: int, controller: int, keystore: Path, ca: Path, admin_password: str, writer_password: str
) -> dict[str, str]:
    scram_jaas = f'{_SCRAM_MODULE} required username="{ADMIN}" password="{admin_password}";'
    plain_jaas = (
        f'{_PLAIN_MODULE} required username="{ADMIN}" password="{admin_password}" '
        f'user_{ADMIN}="{admin_password}" user_{WRITER}="{writer_password}";'
    )
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": f"{MECHANISM},PLAIN",
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        # The controller's own listener is plaintext on 127.0.0.1; the broker reaches it as ANONYMOUS.
        "super.users": f"User:{ADMIN};User:ANONYMOUS",
    }
