"""Sink profiles: what eosink's tooling knows about each kind of sink, found by name.

A connector describes itself to the tooling (``eosink status`` and ``eosink recover``, the chaos
harness, the benchmark, the demo, the contract suite's harness) with one :class:`SinkProfile`.
A connector in eosink keeps it in ``eosink/connectors/<name>/profile.py`` as ``PROFILE``; a
connector in another distribution names it in the entry-point group ``eosink.sinks``::

    [project.entry-points."eosink.sinks"]
    files = "eosink_files.profile:PROFILE"

So adding a sink means its folder and its profile, nothing edited elsewhere: every tool lists
the sinks it can serve from :func:`profiles`, never from a list of its own. A profile module
imports only the standard library and eosink's core at import time (a missing driver must not
break ``eosink --help``); each method imports what it needs.

What each tool asks of a profile (a tool skips profiles that do not offer its part):

========================  ======================================================
``add_arguments``,        ``eosink status`` / ``eosink recover``: which options
``admin``                 name a configured sink, and its :class:`~eosink.admin.SinkAdmin`
``contract_harness``      the contract suite's :class:`~eosink.contracts.SinkHarness`
``chaos_target``          the chaos harness's :class:`~eosink.chaos.target.ChaosTarget`
``bench_adapter``         the benchmark's :class:`~eosink.bench.runs.BenchAdapter`
``demo_target``           the demo's :class:`~eosink.demo.target.DemoTarget`
========================  ======================================================
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import pkgutil
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from eosink.errors import ConfigurationError

if TYPE_CHECKING:
    from eosink.admin import SinkAdmin
    from eosink.bench.runs import BenchAdapter
    from eosink.chaos.target import ChaosTarget
    from eosink.contracts.harness import SinkHarness
    from eosink.demo.target import DemoTarget

__all__ = ["ENTRY_POINT_GROUP", "TOOLS", "SinkProfile", "get_profile", "profile_names", "profiles", "sink_argument"]

log = logging.getLogger("eosink")

ENTRY_POINT_GROUP = "eosink.sinks"
"""Where connectors outside eosink register their profile."""

TOOLS = ("admin", "contract_harness", "chaos_target", "bench_adapter", "demo_target")
"""The parts a profile may offer (``admin`` also covers ``add_arguments``)."""


class SinkProfile(ABC):
    """Everything the tooling knows about one kind of sink (see the module docstring)."""

    name: ClassVar[str]
    """The sink's name on command lines and in reports: ``[a-z0-9-]+``."""
    title: ClassVar[str]
    """How people call it: ``PostgreSQL``."""
    summary: ClassVar[str]
    """One line: what eosink writes into it and how."""
    extra: ClassVar[str] = ""
    """The pip extra that installs its driver: ``pip install 'eosink[<extra>]'``."""
    docs: ClassVar[str] = ""
    """Its page under ``docs/`` (``connectors/postgres.md``)."""
    services: ClassVar[tuple[str, ...]] = ()
    """The service harness's servers its tests and tools need (``eosink services up ...``)."""
    datasource: ClassVar[tuple[str, str, str] | None] = None
    """What ``format("eosink")`` builds from ``<name>.*`` options: (module, config class, sink class); without a
    config class, the options are the sink constructor's keyword arguments. None: not offered there."""
    chaos_topologies: ClassVar[tuple[str, ...]] = ("single",)
    """The server layouts its chaos target runs on: ``single``, and ``replicated`` (a primary with standbys that
    fail over) where it offers that."""
    bench_topologies: ClassVar[tuple[str, ...]] = ("single",)
    """The server layouts its benchmark runs on: ``single``, and ``cluster`` (Kafka's three nodes) where offered."""
    commit_request_marker: ClassVar[bytes | re.Pattern[bytes] | None] = None
    """Bytes of (or a pattern matching) the request that commits a batch, for fault proxies that cut
    its reply; None when requests cannot be matched (encrypted, or no network)."""

    # -- eosink status / eosink recover -------------------------------------------------------

    @abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the options that name one configured sink (connection, target, where its bookkeeping is)."""

    @abstractmethod
    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        """The admin of the sink the parsed options name; ConfigurationError when they name none."""

    def secrets_note(self) -> str:
        """How a secret reaches ``eosink status`` without the command line (printed under ``--help``)."""
        return ""

    # -- tooling (each optional) ---------------------------------------------------------------

    def contract_harness(self, **options: Any) -> SinkHarness:
        """The contract suite's harness for this sink (against the service harness's server)."""
        raise NotImplementedError(f"{type(self).__name__} offers no contract harness")

    def chaos_target(self, root: Path | None = None, *, topology: str = "single") -> ChaosTarget:
        """The chaos harness's target: a private server under ``root`` (or a temporary directory); with
        ``topology="replicated"`` a private primary with standbys (one of :attr:`chaos_topologies`)."""
        raise NotImplementedError(f"{type(self).__name__} offers no chaos target")

    def bench_adapter(self, *, topology: str = "single") -> BenchAdapter:
        """The benchmark's adapter: the eosink runs, the sink's own baselines and its raw limit; on servers laid
        out as ``topology`` (one of :attr:`bench_topologies`)."""
        raise NotImplementedError(f"{type(self).__name__} offers no benchmark adapter")

    def demo_target(self) -> DemoTarget:
        """What the demo needs: a private server, the eosink sink and the plain writer it is set against."""
        raise NotImplementedError(f"{type(self).__name__} offers no demo")

    def offers(self, tool: str) -> bool:
        """Whether this profile offers ``tool`` (one of :data:`TOOLS`)."""
        if tool not in TOOLS:
            raise ValueError(f"unknown tool {tool!r}; one of {TOOLS}")
        if tool == "admin":
            return True
        return getattr(type(self), tool) is not getattr(SinkProfile, tool)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


_FOUND: dict[str, SinkProfile] | None = None
_BROKEN: dict[str, str] = {}


def profiles() -> dict[str, SinkProfile]:
    """Every sink profile, by name: eosink's own connectors, then the ``eosink.sinks`` entry points.

    A profile that cannot be loaded is left out (logged); :func:`get_profile` names its error.
    """
    global _FOUND
    if _FOUND is None:
        found: dict[str, SinkProfile] = {}
        for name, load in _candidates():
            try:
                profile = load()
            except _NoProfile:
                continue
            except Exception as exc:  # a broken third-party profile must not break every tool
                _BROKEN[name] = f"{type(exc).__name__}: {exc}"
                log.warning("eosink: the sink profile %r cannot be loaded: %s", name, exc)
                continue
            if not isinstance(profile, SinkProfile):
                _BROKEN[name] = f"{profile!r} is not a SinkProfile"
                continue
            found.setdefault(profile.name, profile)
        _FOUND = dict(sorted(found.items()))
    return _FOUND


def _candidates() -> list[tuple[str, Any]]:
    import eosink.connectors

    out: list[tuple[str, Any]] = []
    for module in pkgutil.iter_modules(eosink.connectors.__path__):
        if module.ispkg and not module.name.startswith("_"):
            qualified = f"eosink.connectors.{module.name}.profile"
            out.append((module.name, lambda q=qualified: _load_module_profile(q)))
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        out.append((entry.name, lambda e=entry: _instance(e.load())))
    return out


def _load_module_profile(qualified: str) -> Any:
    try:
        module = importlib.import_module(qualified)
    except ModuleNotFoundError as exc:
        if exc.name == qualified:  # a connector folder without a profile: nothing to offer
            raise _NoProfile(qualified) from None
        raise
    return _instance(module.PROFILE)


class _NoProfile(Exception):
    """A connector folder that has no profile module."""


def _instance(obj: Any) -> Any:
    return obj() if isinstance(obj, type) else obj


def profile_names(tool: str | None = None) -> list[str]:
    """Names of the profiles (that offer ``tool``, if given), sorted."""
    return [n for n, p in profiles().items() if tool is None or p.offers(tool)]


def sink_argument(tool: str) -> Callable[[str], str]:
    """An ``argparse`` type for a command's ``--sink``: a sink whose profile offers ``tool``, or several joined
    by ``+`` (a fan-out, in commit order), each named once."""
    offered = profile_names(tool)

    def check(text: str) -> str:
        parts = text.split("+")
        if any(part not in offered for part in parts) or len(set(parts)) != len(parts):
            raise argparse.ArgumentTypeError(
                f"invalid sink {text!r}: use one of {', '.join(offered)}, or several joined by '+' (a fan-out), "
                "each once"
            )
        return text

    return check


def get_profile(name: str, tool: str | None = None) -> SinkProfile:
    """The profile of sink ``name``; ConfigurationError naming the known sinks when there is none
    (or when it does not offer ``tool``)."""
    found = profiles().get(name)
    if found is None:
        broken = _BROKEN.get(name)
        if broken is not None:
            raise ConfigurationError(
                f"The sink profile {name!r} cannot be loaded: {broken}.",
                f"Install the sink's driver (pip install 'eosink[{name}]'), or fix the connector.",
            )
        raise ConfigurationError(
            f"There is no sink called {name!r}.", f"Use one of: {', '.join(profile_names(tool)) or 'none'}."
        )
    if tool is not None and not found.offers(tool):
        raise ConfigurationError(
            f"The {found.title} sink offers no {tool.replace('_', ' ')}.",
            f"Use one of: {', '.join(profile_names(tool)) or 'none'}.",
        )
    return found
