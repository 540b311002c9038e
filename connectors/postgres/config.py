"""PostgresConfig: everything a PostgresSink needs, as one frozen, picklable value.

The connection string is kept as given (normalised), because executors need it to connect;
it never appears in ``repr``/``str``, and :meth:`PostgresConfig.scrub` removes the password
from any text (error messages) that might echo it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import quote

from eosink.errors import ConfigurationError

__all__ = ["PostgresConfig", "TableName", "parse_table_name"]

TableName = tuple[str | None, str]
"""A target table: (schema or None for the search_path, table), each an exact identifier."""

_MAX_IDENTIFIER_BYTES = 63  # NAMEDATALEN - 1: PostgreSQL silently truncates longer names
_DRIVER_SCHEME = re.compile(r"^(postgres(?:ql)?)\+[A-Za-z0-9_]+://", re.IGNORECASE)
_SECRET_KEYS = ("password", "sslpassword")


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


@dataclass(frozen=True, repr=False)
class PostgresConfig:
    """Configuration of a :class:`~eosink.connectors.postgres.PostgresSink`.

    * ``conninfo``: a libpq URL (``postgresql://user:pw@host:5432/db?sslmode=require``), a
      keyword string (``host=... dbname=...``) or an SQLAlchemy URL (``postgresql+psycopg://...``;
      the ``+driver`` is dropped). Never shown in ``repr``.
    * ``table``: the target, ``"table"``, ``"schema.table"`` or ``(schema, table)``; see
      :func:`parse_table_name`. Unqualified names resolve through the ``search_path``.
    * ``mode``: ``"append"`` inserts; ``"upsert"`` upserts by ``key_columns`` (a task's own
      upsert keys, e.g. the idempotent strategy's, take precedence).
    * ``control_schema``: where the sink keeps its bookkeeping (epochs, txns, bundles, staging).
    * ``create_table``: create the target from the first batch's Arrow schema if it is missing,
      and the unique index an upsert needs if the target lacks it.
    * ``commit_mode``: ``"atomic"``: participants stage their rows and ``PREPARE``; the batch
      becomes visible in one transaction with its bundle.
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
    commit_mode: Literal["atomic"] = "atomic"
    connect_timeout_s: float = 10.0
    statement_timeout_s: float | None = None
    lock_timeout_s: float | None = None
    application_name: str = "eosink"
    retention_s: float = 7 * 86400.0
    cleanup_interval_s: float | None = 3600.0
    target: TableName = field(init=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.conninfo, str) or not self.conninfo.strip():
            raise ConfigurationError("PostgresConfig needs a conninfo.", "Pass conninfo='postgresql://...'.")
        set_(self, "conninfo", _DRIVER_SCHEME.sub(lambda m: f"{m.group(1)}://", self.conninfo.strip(), count=1))
        try:
            from psycopg.conninfo import conninfo_to_dict

            conninfo_to_dict(self.conninfo)
        except ImportError as exc:
            raise ConfigurationError(
                "The PostgreSQL connector needs psycopg 3.", "pip install 'eosink[postgres]'."
            ) from exc
        except Exception:
            # Never chain or echo the parser's error: it may quote the password.
            raise ConfigurationError(
                "The PostgreSQL conninfo is not a valid libpq URL or keyword string.",
                "Use postgresql://USER:PASSWORD@HOST:PORT/DBNAME or 'host=... dbname=...'.",
            ) from None
        if self.mode not in ("append", "upsert"):
            raise ConfigurationError(f"Unknown mode {self.mode!r} for PostgresSink.", "Use 'append' or 'upsert'.")
        if self.commit_mode != "atomic":
            raise ConfigurationError(
                f"commit_mode={self.commit_mode!r} is not supported yet.",
                "Use commit_mode='atomic' (batch-atomic: staged rows move in one transaction with the bundle).",
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
        for secret in self._secrets():
            text = text.replace(secret, "***")
        return text

    def __repr__(self) -> str:
        schema, table = self.target
        return (
            f"PostgresConfig(conninfo={self.redacted_conninfo()!r}, table={(schema, table)!r}, mode={self.mode!r}, "
            f"key_columns={self.key_columns!r}, control_schema={self.control_schema!r}, "
            f"create_table={self.create_table!r}, commit_mode={self.commit_mode!r})"
        )

    __str__ = __repr__
