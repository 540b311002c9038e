"""PostgresConfig: everything a PostgresSink needs, as one frozen, picklable value.

The connection string is kept as given (normalised), because executors need it to connect;
it never appears in ``repr``/``str``, and :meth:`PostgresConfig.scrub` removes the password
from any text (error messages) that might echo it.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import quote

from eosink._secrets import scrub
from eosink.errors import ConfigurationError

__all__ = ["PostgresConfig", "TableName", "parse_table_name"]

TableName = tuple[str | None, str]
"""A target table: (schema or None for the search_path, table), each an exact identifier."""

_MAX_IDENTIFIER_BYTES = 63  # NAMEDATALEN - 1: PostgreSQL silently truncates longer names
_DRIVER_SCHEME = re.compile(r"^(postgres(?:ql)?)\+[A-Za-z0-9_]+://", re.IGNORECASE)
_SECRET_KEYS = ("password", "sslpassword")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def parse_table_name(table: str | Sequence[str]) -> TableName:
    """``"t"``, ``"s.t"``, ``'"my.schema"."odd""name"'`` or ``("s", "t")`` -> (schema, table).

    Unquoted parts are taken literally (no case folding: ``"Events"`` is the table ``"Events"``);
    double quotes are needed only for names that contain a dot or a double quote.
    """
    if not isinstance(table, str):
        parts = list(table)
        if len(parts) not in (1, 2) or not all(isinstance(p, str) for p in parts):
            raise ConfigurationError(
                f"table={table!r} is neither a name nor a (schema, table) pair.", "Pass table='schema.table'."
            )
    else:
        parts = _split_identifiers(table)
    for part in parts:
        _check_identifier(part, "table name")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def _split_identifiers(text: str) -> list[str]:
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] == '"':
            j, buf = i + 1, []
            while True:
                k = text.find('"', j)
                if k < 0:
                    raise ConfigurationError(f"table={text!r} has an unclosed double quote.", 'Write "a""b" for a".')
                buf.append(text[j:k])
                if k + 1 < n and text[k + 1] == '"':
                    buf.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            parts.append("".join(buf))
        else:
            k = text.find(".", i)
            parts.append(text[i:] if k < 0 else text[i:k])
            i = n if k < 0 else k
        if i >= n:
            break
        if text[i] != "." or len(parts) == 2:
            raise ConfigurationError(
                f"table={text!r} is not 'table' or 'schema.table'.",
                'Quote names that contain dots or quotes: \'"my.schema"."my table"\', or pass a (schema, table) tuple.',
            )
        i += 1
    return parts


def _check_identifier(name: str, what: str) -> None:
    if not name or "\x00" in name:
        raise ConfigurationError(f"The {what} {name!r} is empty or contains a NUL character.", "Use another name.")
    if len(name.encode()) > _MAX_IDENTIFIER_BYTES:
        raise ConfigurationError(
            f"The {what} {name!r} is longer than PostgreSQL's {_MAX_IDENTIFIER_BYTES} bytes.",
            "Use a shorter name (PostgreSQL would silently truncate it).",
        )


def _libpq_conninfo(conninfo: object) -> str:
    """``conninfo`` as libpq reads it: a libpq URL or keyword string as given (stripped); an SQLAlchemy URL
    (``"postgresql+psycopg://..."``, a ``sqlalchemy.engine.URL``, or an ``Engine``'s) as a libpq URL.

    SQLAlchemy decodes the URL (a password keeps every special character) and each part is
    percent-encoded again for libpq; query options (``sslmode=...``) pass through, and SQLAlchemy's
    ``?host=h1:5432&host=h2:5433`` becomes libpq's ``h1:5432,h2:5433``. Error messages never quote the
    value: it may hold a password.
    """
    if isinstance(conninfo, str) and not _DRIVER_SCHEME.match(conninfo.strip()):
        return conninfo.strip()
    url = _sqlalchemy_url(conninfo)
    options: dict[str, str] = {}
    for key, value in url.query.items():
        if key in ("host", "port"):
            continue
        if not isinstance(value, str):
            raise ConfigurationError(f"The SQLAlchemy URL gives option {key!r} more than once.", "Give it once.")
        options[key] = value
    userinfo = "" if url.username is None else quote(url.username, safe="")
    if url.password is not None:
        userinfo += ":" + quote(url.password, safe="")
    hosts = ",".join(
        ("" if not host else f"[{host}]" if ":" in host else quote(host, safe="")) + (f":{port}" if port else "")
        for host, port in _url_hosts(url)
    )
    text = f"postgresql://{userinfo}{'@' if userinfo else ''}{hosts}"
    if url.database is not None:
        text += "/" + quote(url.database, safe="")
    if options:
        text += "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in options.items())
    return text


def _sqlalchemy_url(conninfo: object) -> Any:
    """``conninfo`` as a ``sqlalchemy.engine.URL`` of a PostgreSQL database, or ConfigurationError."""
    try:
        from sqlalchemy.engine import URL, Engine, make_url
    except ImportError:
        if isinstance(conninfo, str):
            raise ConfigurationError(
                "Reading an SQLAlchemy URL (postgresql+driver://...) needs SQLAlchemy, which is not installed.",
                "pip install 'eosink[postgres]', or write the URL as postgresql://...",
            ) from None
        raise ConfigurationError("PostgresConfig needs a conninfo.", "Pass conninfo='postgresql://...'.") from None
    url: Any = conninfo
    engine = getattr(url, "sync_engine", url)  # an AsyncEngine's
    if isinstance(engine, Engine):
        url = engine.url
    elif isinstance(url, str):
        url = _parse_quietly(make_url, url.strip())
        if url is None:  # raised outside the parser's except: its error may quote the password
            raise ConfigurationError(
                "The conninfo is not a valid SQLAlchemy URL.",
                "Use postgresql+psycopg://USER:PASSWORD@HOST:PORT/DBNAME (URL-encode special characters).",
            )
    if not isinstance(url, URL):
        raise ConfigurationError(
            f"PostgresConfig needs a conninfo, not a {type(conninfo).__name__}.",
            "Pass a libpq URL or keyword string, an SQLAlchemy URL, or an SQLAlchemy Engine.",
        )
    backend = url.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise ConfigurationError(
            f"The SQLAlchemy URL is for {backend!r}, not PostgreSQL.", "Use postgresql+psycopg://..."
        )
    return url


def _parse_quietly(parse: Any, text: str) -> Any:
    """``parse(text)``, or None when it raises.

    A parser's error may quote the text it was given, password included. An error raised inside the
    ``except`` that caught it would keep it as ``__context__`` (``from None`` only hides it from the
    default traceback printer; error trackers and debuggers still show it), so callers raise theirs
    after this returns.
    """
    try:
        return parse(text)
    except Exception:
        return None


def _check_params(params: dict[str, Any]) -> None:
    """What libpq would only refuse at connect time, as a retried TransientError: refused here, at once."""
    ports = str(params.get("port") or "")
    for port in ports.split(",") if ports else ():
        if port.strip() and not (port.strip().isdigit() and 0 < int(port) < 65536):  # empty: the default
            raise ConfigurationError(
                f"The conninfo's port {port.strip()!r} is not a TCP port number.",
                "Give a number between 1 and 65535 (e.g. 5432), or leave the port out for the default.",
            )
    timeout = params.get("connect_timeout")
    if timeout is not None and not str(timeout).strip().lstrip("-").isdigit():
        raise ConfigurationError(
            f"The conninfo's connect_timeout {timeout!r} is not a number of seconds.", "Give e.g. connect_timeout=10."
        )
    sslmode = params.get("sslmode")
    if sslmode is not None and sslmode not in _SSLMODES:
        raise ConfigurationError(
            f"The conninfo's sslmode {sslmode!r} is not one libpq knows.", f"Use one of {', '.join(_SSLMODES)}."
        )
    hosts = str(params.get("host") or "")
    if ports and hosts and len(ports.split(",")) not in (1, len(hosts.split(","))):
        raise ConfigurationError(
            f"The conninfo names {len(hosts.split(','))} hosts but {len(ports.split(','))} ports.",
            "Give one port, or one port per host.",
        )


def _url_hosts(url: Any) -> list[tuple[str, str]]:
    """(host, port) pairs, from the URL's netloc or from SQLAlchemy's ``?host=h:p&host=...`` form."""
    given, port_option = url.query.get("host"), url.query.get("port")
    port = "" if url.port is None else str(url.port)
    if not port and port_option is not None:
        if not isinstance(port_option, str):
            raise ConfigurationError("The SQLAlchemy URL gives option 'port' more than once.", "Give it once.")
        port = port_option
    if given is None:
        if not (port == "" or port.isdigit()):
            raise ConfigurationError("The SQLAlchemy URL has a port that is not a number.", "Fix the port.")
        return [(url.host or "", port)]
    if url.host:
        raise ConfigurationError("The SQLAlchemy URL gives a host both before the path and as ?host=.", "Give one.")
    pairs = []
    for item in (given,) if isinstance(given, str) else given:
        if item.startswith("["):  # [IPv6] or [IPv6]:port
            host, _, rest = item[1:].partition("]")
            pairs.append((host, rest[1:] if rest.startswith(":") else port))
        elif item.count(":") == 1 and not item.startswith("/"):  # host:port (a socket directory has no port)
            host, _, item_port = item.partition(":")
            pairs.append((host, item_port or port))
        else:
            pairs.append((item, port))
    if not all(p.isdigit() for _, p in pairs if p):
        raise ConfigurationError("The SQLAlchemy URL has a port that is not a number.", "Fix the port.")
    return pairs


@dataclass(frozen=True, repr=False)
class PostgresConfig:
    """Configuration of a :class:`~eosink.connectors.postgres.PostgresSink`.

    * ``conninfo``: a libpq URL (``postgresql://user:pw@host:5432/db?sslmode=require``), a
      keyword string (``host=... dbname=...``), or an SQLAlchemy URL (``postgresql+psycopg://...``,
      a ``sqlalchemy.engine.URL``, or an ``Engine``), turned into the libpq URL it names (the
      password decoded and re-encoded, query options kept). Never shown in ``repr``; after
      construction always the libpq string.
    * ``table``: the target, ``"table"``, ``"schema.table"`` or ``(schema, table)``; see
      :func:`parse_table_name`. Unqualified names resolve through the ``search_path``.
    * ``mode``: ``"append"`` inserts; ``"upsert"`` upserts by ``key_columns`` (a task's own
      upsert keys, e.g. the idempotent strategy's, take precedence).
    * ``control_schema``: where the sink keeps its bookkeeping (epochs, txns, bundles, staging).
    * ``create_table``: create the target from the first batch's Arrow schema if it is missing,
      and the unique index an upsert needs if the target lacks it.
    * ``commit_mode``: ``"atomic"`` (default): participants stage their rows (2pc: and
      ``PREPARE``); the batch becomes visible in one transaction with its bundle.
      ``"per-participant"``: participants write into the target inside a prepared transaction
      and ``COMMIT PREPARED`` makes each share visible, partition by partition, the bundle last;
      commits are shorter (no move), but readers may see part of a batch, every strategy then
      needs prepared transactions, and a key written by two partitions of one batch makes the
      second wait for the first until ``lock_timeout_s``.
    * ``connect_timeout_s``, ``statement_timeout_s`` (None: the server's), ``lock_timeout_s``.
    * ``retention_s``: finished bookkeeping (txns rows, bundles but the newest per app_id) older
      than this is deleted by the cleanup, which runs at most every ``cleanup_interval_s`` across
      all writers of the control schema (None: only when ``PostgresSink.cleanup()`` is called).
    """

    conninfo: str
    table: str | tuple[str, str]
    mode: Literal["append", "upsert"] = "append"
    key_columns: tuple[str, ...] = ()
    control_schema: str = "eosink"
    create_table: bool = False
    commit_mode: Literal["atomic", "per-participant"] = "atomic"
    connect_timeout_s: float = 10.0
    statement_timeout_s: float | None = None
    lock_timeout_s: float | None = None
    application_name: str = "eosink"
    retention_s: float = 7 * 86400.0
    cleanup_interval_s: float | None = 3600.0
    target: TableName = field(init=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "conninfo", _libpq_conninfo(self.conninfo))
        if not self.conninfo:
            raise ConfigurationError("PostgresConfig needs a conninfo.", "Pass conninfo='postgresql://...'.")
        try:
            from psycopg.conninfo import conninfo_to_dict
        except ImportError as exc:
            raise ConfigurationError(
                "The PostgreSQL connector needs psycopg 3.", "pip install 'eosink[postgres]'."
            ) from exc
        params = _parse_quietly(conninfo_to_dict, self.conninfo)
        if params is None:  # neither chained nor echoed: the parser's error may quote the password
            raise ConfigurationError(
                "The PostgreSQL conninfo is not a valid libpq URL or keyword string.",
                "Use postgresql://USER:PASSWORD@HOST:PORT/DBNAME or 'host=... dbname=...'.",
            )
        _check_params(params)
        if self.mode not in ("append", "upsert"):
            raise ConfigurationError(f"Unknown mode {self.mode!r} for PostgresSink.", "Use 'append' or 'upsert'.")
        if self.commit_mode not in ("atomic", "per-participant"):
            raise ConfigurationError(
                f"Unknown commit_mode {self.commit_mode!r} for PostgresSink.",
                "Use 'atomic' (a batch becomes visible at once) or 'per-participant' (faster commits; visible "
                "partition by partition).",
            )
        raw: Any = self.key_columns
        keys = (raw,) if isinstance(raw, str) else tuple(raw)
        set_(self, "key_columns", keys)
        for key in keys:
            _check_identifier(key, "key column")
        if self.mode == "upsert" and not keys:
            raise ConfigurationError("PostgresSink(mode='upsert') needs key columns.", "Pass key_columns=[...].")
        _check_identifier(self.control_schema, "control schema")
        set_(self, "target", parse_table_name(self.table))
        if self.connect_timeout_s <= 0:
            raise ConfigurationError("connect_timeout_s must be positive.", "Pass e.g. connect_timeout_s=10.")
        if self.retention_s < 0:
            raise ConfigurationError("retention_s must not be negative.", "Pass e.g. retention_s=7 * 86400.")
        if self.cleanup_interval_s is not None and self.cleanup_interval_s <= 0:
            raise ConfigurationError("cleanup_interval_s must be positive.", "Pass e.g. 3600, or None to disable.")

    # -- connecting ------------------------------------------------------------------------

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect(self.conninfo, **kwargs)``: timeouts, UTC, a name."""
        options = ["-c TimeZone=UTC"]
        if self.statement_timeout_s is not None:
            options.append(f"-c statement_timeout={round(self.statement_timeout_s * 1000)}")
        if self.lock_timeout_s is not None:
            options.append(f"-c lock_timeout={round(self.lock_timeout_s * 1000)}")
        from psycopg.conninfo import conninfo_to_dict

        given = str(conninfo_to_dict(self.conninfo).get("options") or "")
        return {
            "connect_timeout": max(2, math.ceil(self.connect_timeout_s)),
            "application_name": self.application_name,
            "options": " ".join([given, *options]).strip(),
        }

    def with_address(self, host: str, port: int) -> PostgresConfig:
        """The same configuration reaching the server at ``host:port`` (e.g. through a proxy)."""
        from psycopg.conninfo import make_conninfo

        return replace(self, conninfo=make_conninfo(self.conninfo, host=host, port=str(port), hostaddr=None))

    # -- secrets ---------------------------------------------------------------------------

    def redacted_conninfo(self) -> str:
        """The connection parameters with every password replaced by ``***``."""
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(self.conninfo)
        for key in _SECRET_KEYS:
            if params.get(key):
                params[key] = "***"
        return make_conninfo("", **params)

    def _secrets(self) -> list[str]:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.conninfo)
        found = {str(params[k]) for k in _SECRET_KEYS if params.get(k)}
        found |= {quote(s, safe="") for s in found} | {quote(s) for s in found}
        return sorted((s for s in found if s), key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with any password of the conninfo (plain or URL-encoded) replaced by ``***``."""
        return scrub(text, self._secrets())

    def scrub_chain(self, exc: BaseException) -> None:
        """Scrub the arguments of ``exc`` and of every exception chained to it (suppressed ones too).

        An eosink error raised while handling a driver's error keeps that error as ``__context__``,
        where error trackers and debuggers show it; its text may hold what :meth:`scrub` removes.
        """
        seen: set[int] = set()
        todo = [exc]
        while todo:
            current = todo.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            with contextlib.suppress(Exception):  # some exception types refuse new args
                current.args = tuple(self.scrub(a) if isinstance(a, str) else a for a in current.args)
            todo += [e for e in (current.__cause__, current.__context__) if e is not None]

    def __repr__(self) -> str:
        schema, table = self.target
        return (
            f"PostgresConfig(conninfo={self.redacted_conninfo()!r}, table={(schema, table)!r}, mode={self.mode!r}, "
            f"key_columns={self.key_columns!r}, control_schema={self.control_schema!r}, "
            f"create_table={self.create_table!r}, commit_mode={self.commit_mode!r})"
        )

    __str__ = __repr__
