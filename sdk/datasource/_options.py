"""The string options of ``format("eosink")``, parsed into a sink, a strategy and an app_id.

Spark hands a data source its options as strings, keys case-insensitive. eosink's own are
``sink``, ``app_id``, ``strategy`` and ``key_columns`` (and Spark's ``checkpointLocation``; Spark's
``queryName`` and ``path`` pass unused);
a connector's are its config's fields under the sink's name: ``postgres.table``,
``s3.part_size_bytes``. Several sinks (a fan-out, :mod:`eosink.fanout`) are listed in commit
order, ``sink=postgres,kafka``, or named, ``sink=ledger=postgres,events=kafka``; each one's
options go under its name (``ledger.table``). A field's value may come from an environment variable instead,
named by ``<sink>.<field>_env`` (for secrets: ``postgres.conninfo_env=PG_URL``). Values are
converted by the field's type; a wrong one is a :class:`~eosink.errors.ConfigurationError`
that names the option (and never echoes a secret's value).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from eosink.contract import Sink
from eosink.errors import ConfigurationError
from eosink.strategies import Idempotent, Strategy, TwoPhaseCommit, resolve_strategy

_log = logging.getLogger("eosink.datasource")

__all__ = ["CONNECTORS", "ParsedOptions", "options_from_config", "options_table", "parse_options"]


class _Connectors(Mapping[str, tuple[str, str, str, str]]):
    """Sink name -> (module, config class, sink class, pip extra), read from the sink profiles that offer
    ``format("eosink")`` (:attr:`eosink.profiles.SinkProfile.datasource`) at first use."""

    def __init__(self) -> None:
        self._found: dict[str, tuple[str, str, str, str]] | None = None

    def _all(self) -> dict[str, tuple[str, str, str, str]]:
        if self._found is None:
            from eosink.profiles import profiles

            self._found = {
                name: (*profile.datasource, profile.extra)
                for name, profile in profiles().items()
                if profile.datasource is not None
            }
        return self._found

    def __getitem__(self, name: str) -> tuple[str, str, str, str]:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


CONNECTORS: Mapping[str, tuple[str, str, str, str]] = _Connectors()
"""Sink name -> (module, config class, sink class, pip extra), from the sink profiles. Without a config class,
the options are the sink constructor's keyword arguments (the SQLite reference sink, for tests and examples)."""

_OWN = ("sink", "app_id", "strategy", "key_columns", "checkpointlocation", "batch_id", "arrow")
_SPARK_OWN = ("path", "queryname")
"""Options Spark itself puts among a data source's (lower-cased), none of them eosink's: ``path`` from
``.start(path)`` / ``.save(path)`` and ``queryName`` from ``.queryName(...)`` (``checkpointLocation`` is in
``_OWN``: eosink reads it). The same on every PySpark from 4.0; the Spark tests name their queries and start
with a path, so a new one of Spark's shows up as an unknown option there."""
_SECRET = re.compile(r"pass|secret|token|conninfo|credential|keytab|key_id|sasl|auth", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedOptions:
    """What the options say: the sink (or, for a fan-out, the sinks) to write to and how."""

    sink_name: str
    """The ``sink`` option as given, lower-cased: ``postgres``, or a fan-out's list."""
    sink: Sink[Any]
    """The sink; a fan-out's first."""
    app_id: str
    strategy: Strategy
    checkpoint_location: str | None
    batch_id: int | None
    arrow: bool = True
    """Tasks take Spark's Arrow record batches (PySpark 4.1+ for streams); False: its row iterator."""
    fanout: tuple[tuple[str, Sink[Any]], ...] = ()
    """A fan-out's sinks by name, in commit order (each keeps its bookkeeping under ``<app_id>.<name>``);
    empty for one sink."""


def parse_options(options: Mapping[str, str], *, streaming: bool) -> ParsedOptions:
    """Parse ``options`` (keys case-insensitive) for a streaming or a batch write; raise on any problem."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    sink_name = _required(opts, "sink", f"Name the sink: .option('sink', 'postgres'); one of {', '.join(CONNECTORS)}.")
    sink_name = sink_name.strip().lower()
    members = _members(sink_name)
    app_id = _required(opts, "app_id", "Name this (query, sink) pair for good: .option('app_id', 'payments-ledger').")
    if not app_id.strip() or len(app_id) > 200:
        raise ConfigurationError(
            "Option 'app_id' must be a non-empty string of at most 200 characters.",
            "Choose a stable name for this (query, sink) pair, e.g. 'payments-to-ledger'.",
        )
    strategy = _strategy(opts)
    checkpoint = opts.get("checkpointlocation")
    batch_id = _batch_id(opts, streaming)
    if streaming and not checkpoint:
        raise ConfigurationError(
            "A streaming write through format('eosink') needs Spark's checkpoint location.",
            "Add .option('checkpointLocation', '/path/to/checkpoint') to the writeStream.",
        )
    prefixes = tuple(f"{name}." for name, _ in members)
    unknown = sorted(k for k in opts if k not in _OWN and k not in _SPARK_OWN and not k.startswith(prefixes))
    if unknown:
        other = [k for k in unknown if k.split(".", 1)[0] in CONNECTORS]
        hint = f" (options of sink {other[0].split('.', 1)[0]!r}, but the sink is {sink_name!r})" if other else ""
        if other and len(members) > 1:
            names = [name for name, _ in members]
            hint = f" (the fan-out's sinks are named {names}: give each one's options under its name)"
        under = " or ".join(f"'{prefix}'" for prefix in prefixes)
        raise ConfigurationError(
            f"Unknown option(s) {unknown}{hint}.",
            f"eosink's options are {', '.join(o for o in _OWN if o != 'checkpointlocation')}, "
            f"checkpointLocation, and the sink's under {under} (see docs/datasource.md).",
        )
    if "path" in opts:
        _log.warning(
            "format('eosink') ignores the path given to start()/save(): the sink writes where its options say."
        )
    arrow = convert("arrow", opts.get("arrow", "true"), bool)
    sinks: list[tuple[str, Sink[Any]]] = []
    for name, kind in members:
        prefix = f"{name}."
        sink = _make_sink(kind, {k[len(prefix) :]: v for k, v in opts.items() if k.startswith(prefix)}, name)
        strategy.check(sink.capabilities, type(sink).__name__)
        sinks.append((name, sink))
    fanout = tuple(sinks) if len(sinks) > 1 else ()
    return ParsedOptions(sink_name, sinks[0][1], app_id, strategy, checkpoint, batch_id, arrow, fanout)


def _members(text: str) -> list[tuple[str, str]]:
    """(name, connector) of each sink the ``sink`` option lists: ``postgres``, ``postgres,kafka`` or
    ``ledger=postgres,events=kafka`` (a fan-out, in commit order); raises on an unknown connector or a bad name."""
    from eosink.fanout import repeated, valid_name

    members: list[tuple[str, str]] = []
    items = [part.strip() for part in text.split(",")]
    for item in items:
        named, _, kind = item.rpartition("=")
        name, kind = (named.strip() if "=" in item else kind.strip()), kind.strip()
        if "=" in item and len(items) == 1:
            raise ConfigurationError(
                f"Option 'sink' names its one sink ({item!r}): names are for the sinks of a fan-out.",
                f"Give the connector alone, .option('sink', {kind!r}), with its options under '{kind}.'.",
            )
        if kind not in CONNECTORS:
            raise ConfigurationError(
                f"Unknown sink {kind!r} in option 'sink'.", f"Use one of: {', '.join(CONNECTORS)}."
            )
        if not valid_name(name) or "." in name:
            raise ConfigurationError(
                f"Sink name {name!r} in option 'sink' is not a name of letters, digits, '-' and '_'.",
                "Name each sink of a fan-out so: .option('sink', 'ledger=postgres,events=kafka').",
            )
        members.append((name, kind))
    names = [name for name, _ in members]
    twice = repeated(names)
    if twice:
        raise ConfigurationError(
            f"Option 'sink' names more than one sink {', '.join(map(repr, twice))}.",
            "Name each sink of a fan-out: .option('sink', 'orders=postgres,audit=postgres'); the names are part of "
            "each sink's app_id, so keep them for good.",
        )
    if len(members) > 1 and any(name in _OWN for name in names):
        raise ConfigurationError(
            f"Sink names {names} in option 'sink' include one of eosink's own options.",
            "Name the sinks otherwise: .option('sink', 'ledger=postgres,events=kafka').",
        )
    return members


def _required(opts: Mapping[str, str], name: str, fix: str) -> str:
    value = opts.get(name)
    if value is None or not value.strip():
        raise ConfigurationError(f"Option {name!r} is missing.", fix)
    return value


def _strategy(opts: Mapping[str, str]) -> Strategy:
    name = opts.get("strategy", "txid-check").strip().lower()
    keys = _tuple(opts.get("key_columns", ""))
    if name == "idempotent":
        if not keys:
            raise ConfigurationError(
                "The idempotent strategy through format('eosink') needs key columns: generated keys need identical "
                "rows in one task, and a data source cannot ask Spark to partition its input so.",
                "Add .option('key_columns', 'id') (comma-separated), use 'txid-check', or use foreach_batch.",
            )
        return Idempotent(key_columns=keys)
    if keys:
        raise ConfigurationError(
            f"Option 'key_columns' is for the idempotent strategy; the strategy is {name!r}.",
            "Remove key_columns, or set .option('strategy', 'idempotent').",
        )
    strategy = resolve_strategy(name)
    if isinstance(strategy, TwoPhaseCommit):
        raise ConfigurationError(
            "The 2pc strategy is not offered through format('eosink'): Spark calls a data source's commit before "
            "it writes the batch to its commit log, and runs no code of the data source after that, so the batch "
            "could only become visible when the next batch starts (never, for a query's last batch).",
            "Use .option('strategy', 'txid-check') (exactly-once for deterministic queries), or "
            "eosink.foreach_batch(..., strategy='2pc') for non-deterministic ones.",
        )
    return strategy


def _batch_id(opts: Mapping[str, str], streaming: bool) -> int | None:
    raw = opts.get("batch_id")
    if streaming:
        if raw is not None:
            raise ConfigurationError(
                "Option 'batch_id' is for batch writes (df.write); a stream's batches are numbered by Spark.",
                "Remove .option('batch_id', ...) from the writeStream.",
            )
        return None
    if raw is None:
        raise ConfigurationError(
            "A batch write through format('eosink') needs a batch_id: a rerun of the same job with the same "
            "(app_id, batch_id) is what eosink recognises and skips.",
            "Add .option('batch_id', ...): a number, or a date such as '2026-11-24' for a daily job.",
        )
    return batch_number(raw)


def batch_number(raw: str) -> int:
    """A batch id from its option text: a non-negative integer, or an ISO date (its yyyymmdd number)."""
    text = raw.strip()
    if text.isdigit():
        return int(text)
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text)
    if m:
        import datetime as dt

        try:
            day = dt.date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            pass
        else:
            return day.year * 10000 + day.month * 100 + day.day
    raise ConfigurationError(
        f"Option 'batch_id' must be a non-negative integer or a date (yyyy-mm-dd), got {raw!r}.",
        "Use the job's run number, or its logical date: .option('batch_id', '2026-11-24').",
    )


def _make_sink(name: str, raw: Mapping[str, str], prefix: str | None = None) -> Sink[Any]:
    """Sink ``name`` (a connector) from its options ``raw``, given in the options under ``prefix`` (its name)."""
    module_name, config_name, sink_name, extra = CONNECTORS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"The {name} sink cannot be loaded ({exc}).", f"Install its extra: pip install 'eosink[{extra}]'."
        ) from None
    sink_cls = getattr(module, sink_name)
    target = getattr(module, config_name) if config_name else sink_cls
    prefix = prefix or name
    try:
        made = target(**_kwargs(prefix, target, raw))
    except ConfigurationError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"The options of sink {prefix!r} are not valid: {exc}",
            f"Check the '{prefix}.' options in docs/datasource.md.",
        ) from None
    sink: Sink[Any] = sink_cls(made) if config_name else made
    return sink


def _parameters(target: Any) -> dict[str, tuple[Any, bool]]:
    """Name -> (type hint, required) of what ``target`` (a config dataclass or a sink class) is built from."""
    if dataclasses.is_dataclass(target):
        hints = typing.get_type_hints(target)
        return {
            f.name: (hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
            for f in dataclasses.fields(target)
            if f.init
        }
    hints = typing.get_type_hints(target.__init__)
    params = list(inspect.signature(target.__init__).parameters.values())[1:]
    return {
        p.name: (hints.get(p.name, str), p.default is inspect.Parameter.empty)
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _kwargs(sink: str, target: Any, raw: Mapping[str, str]) -> dict[str, Any]:
    params = _parameters(target)
    kwargs: dict[str, Any] = {}
    maps: dict[str, dict[str, str]] = {}
    for key, value in raw.items():
        name, sub = key, None
        if key.endswith("_env") and key[: -len("_env")] in params:
            name = key[: -len("_env")]
            value = _from_env(f"{sink}.{key}", value)
        elif "." in key and key.split(".", 1)[0] in params:
            name, sub = key.split(".", 1)
        if name not in params:
            raise ConfigurationError(
                f"Unknown option '{sink}.{key}'.",
                f"The {sink} sink's options are: {', '.join(f'{sink}.{n}' for n in sorted(params))}.",
            )
        if name in kwargs or (sub is None and name in maps):
            raise ConfigurationError(f"Option '{sink}.{name}' is given twice.", "Give each option once.")
        if sub is not None:
            maps.setdefault(name, {})[sub] = value
            continue
        kwargs[name] = convert(f"{sink}.{name}", value, params[name][0])
    for name, mapping in maps.items():
        if not _is_mapping(params[name][0]):
            raise ConfigurationError(
                f"Option '{sink}.{name}' takes one value, not '{sink}.{name}.<key>' entries.",
                f"Set .option('{sink}.{name}', ...).",
            )
        kwargs[name] = mapping
    missing = [n for n, (_, required) in params.items() if required and n not in kwargs]
    if missing:
        raise ConfigurationError(
            f"Option(s) {', '.join(f'{sink}.{n}' for n in missing)} missing: the {sink} sink needs them.",
            f"Add .option('{sink}.{missing[0]}', ...) (or '{sink}.{missing[0]}_env' naming an environment variable).",
        )
    return kwargs


def _from_env(option: str, variable: str) -> str:
    value = os.environ.get(variable.strip())
    if value is None:
        raise ConfigurationError(
            f"Option {option!r} names environment variable {variable.strip()!r}, which is not set in the "
            "Spark driver's and executors' environment.",
            "Export it before starting Spark (and in spark.executorEnv.<NAME> for executors).",
        )
    return value


def _is_mapping(hint: Any) -> bool:
    return typing.get_origin(hint) in (Mapping, dict, typing.get_origin(Mapping[str, str]))


def convert(option: str, value: str, hint: Any) -> Any:
    """``value`` as the type ``hint`` names (str, int, float, bool, Literal, tuple, optional of these)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and value.strip().lower() in ("", "none", "null"):
            return None
        return convert(option, value, _chosen(args, value))
    if origin is Literal:
        if value.strip() not in [str(a) for a in args]:
            allowed = ", ".join(repr(str(a)) for a in args)
            raise ConfigurationError(
                f"Option {option!r} must be one of {allowed}, got {_shown(option, value)}.",
                f"Set .option({option!r}, {str(args[0])!r}) or another of the values named.",
            )
        return next(a for a in args if str(a) == value.strip())
    if hint is bool:
        low = value.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise ConfigurationError(
            f"Option {option!r} must be true or false, got {_shown(option, value)}.", "Use 'true' or 'false'."
        )
    if hint in (int, float):
        try:
            number = int(value.strip().replace("_", "")) if hint is int else float(value.strip())
        except ValueError:
            kind = "an integer" if hint is int else "a number"
            raise ConfigurationError(
                f"Option {option!r} must be {kind}, got {_shown(option, value)}.", f"Give it as {kind}, e.g. '10'."
            ) from None
        return number
    if origin in (tuple, list, Sequence) or hint is tuple:
        return _tuple(value)
    if _is_mapping(hint):
        raise ConfigurationError(
            f"Option {option!r} is a map: give its entries as '{option}.<key>'.",
            f"For example .option('{option}.acks', 'all').",
        )
    return value


def _chosen(args: tuple[Any, ...], value: str = "") -> Any:
    """The member of a union an option's text converts to: a number, flag or choice before text, and a
    list (``str | tuple[str, str]``: a table as ``schema,table``) when the text has a comma."""
    choices = [a for a in args if a is not type(None)]
    scalar = [a for a in choices if a in (int, float, bool) or typing.get_origin(a) is Literal]
    listed = [a for a in choices if typing.get_origin(a) in (tuple, list, Sequence) or a is tuple]
    if not scalar and listed and "," in value:
        return listed[0]
    return (scalar or choices)[0]


def _tuple(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _shown(option: str, value: str) -> str:
    return "a value that is not (hidden: the option may hold a secret)" if _SECRET.search(option) else repr(value)


def options_table(sink: str) -> str:
    """The Markdown table of sink ``sink``'s options (docs/datasource.md holds one per connector)."""
    module_name, config_name, sink_name, _ = CONNECTORS[sink]
    module = importlib.import_module(module_name)
    target = getattr(module, config_name or sink_name)
    rows = ["| option | type | required |", "|---|---|---|"]
    for name, (hint, required) in _parameters(target).items():
        rows.append(f"| `{sink}.{name}` | {_type_text(hint)} | {'yes' if required else ''} |")
    return "\n".join(rows)


def _type_text(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        text = _type_text(_chosen(args))
        if text == "text" and _chosen(args, ",") is not _chosen(args):
            text = "text, or a comma-separated list"
        return f"{text} (or none)" if type(None) in args else text
    if origin is Literal:
        return " / ".join(f"`{a}`" for a in args)
    if origin in (tuple, list, Sequence) or hint is tuple:
        return "comma-separated list"
    if _is_mapping(hint):
        return "map: `.<key>` entries"
    return {str: "text", int: "integer", float: "number", bool: "true / false"}.get(hint, "text")


def options_from_config(
    sink: str, config: Any, *, from_env: Mapping[str, str] | None = None, name: str | None = None
) -> dict[str, str]:
    """The ``format("eosink")`` options that make ``config`` (a connector's config object): its fields that
    differ from their defaults, as strings, under ``<name>.`` (the sink's name in a fan-out; default: the
    connector's, ``sink``). ``from_env`` maps a field to the environment variable that holds its value
    (``{"conninfo": "PG_URL"}``): the option names the variable, not the secret.

    Raises :class:`ConfigurationError` when a field has no text that reads back as its value, and when
    an option's text would hold a secret of the config (Spark shows options in plans and logs)."""
    module_name, config_name, _, _ = CONNECTORS[sink]
    target = getattr(importlib.import_module(module_name), config_name)
    env = dict(from_env or {})
    hints = typing.get_type_hints(target)
    out: dict[str, str] = {}
    read_back: dict[str, Any] = {}
    for f in dataclasses.fields(target):
        if not f.init:
            continue
        value = getattr(config, f.name)
        option = f"{name or sink}.{f.name}"
        if f.name in env:
            if value is None:  # not set here: the other side takes it where this side did (e.g. EOSINK_S3_*)
                continue
            out[f"{option}_env"] = env[f.name]
            read_back[f.name] = value
            continue
        default: Any = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        if default is not dataclasses.MISSING and value == default:
            continue
        if isinstance(value, Mapping):
            entries = {str(k): str(v) for k, v in value.items()}
            for key, text in entries.items():
                _refuse_secret(config, f"{option}.{key}", text)
            out.update({f"{option}.{k}": v for k, v in entries.items()})
            read_back[f.name] = entries
            continue
        if isinstance(value, (tuple, list)):
            text = ",".join(str(v) for v in value)
        elif value is None:
            text = "none"
        elif isinstance(value, bool):
            text = str(value).lower()
        else:
            text = str(value)
        _refuse_secret(config, option, text)
        out[option] = text
        read_back[f.name] = convert(option, text, hints[f.name])
    rebuilt = target(**read_back)
    for f in dataclasses.fields(target):
        if f.init and getattr(rebuilt, f.name) != getattr(config, f.name):
            raise ConfigurationError(
                f"Field {f.name!r} of this {config_name} has no option text that reads back as its value.",
                f"Give '{name or sink}.{f.name}' yourself, or set the field from the environment with from_env.",
            )
    return out


def _refuse_secret(config: Any, option: str, text: str) -> None:
    scrub = getattr(config, "scrub", None)
    if scrub is not None and scrub(text) != text:
        field_name = option.split(".")[1]
        raise ConfigurationError(
            f"Option {option!r} would hold a secret of the config; Spark shows option values in plans and logs.",
            f"Put the secret in an environment variable and pass from_env={{{field_name!r}: 'VARIABLE'}}.",
        )
