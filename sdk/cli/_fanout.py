"""``eosink status`` and ``eosink recover`` over a fan-out's sinks, side by side (:mod:`eosink.fanout`).

Given ``--sink`` more than once, each ``--sink KIND`` (or ``--sink NAME=KIND``) starts the options of
one sink of the fan-out, in its commit order; the command's own options (``--app-id``,
``--checkpoint``, ...) may stand anywhere. A sink named NAME keeps its state under app_id
``<app-id>.<NAME>``; without ``NAME=`` the name is the kind, as ``foreach_batch`` names the sinks
of a list::

    eosink status --app-id payments --checkpoint /chk/payments \\
        --sink ledger=postgres --conninfo ... --table payments \\
        --sink events=kafka --bootstrap-servers ... --topic payment-events
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from eosink.admin import SinkAdmin
from eosink.cli._common import EXIT_USAGE, Usage, run
from eosink.errors import EosinkError
from eosink.fanout import member_app_id, valid_name

__all__ = ["Member", "fanned_out", "run_fanout"]


@dataclass(frozen=True)
class Member:
    """One sink of the fan-out as the command line names it."""

    name: str
    kind: str
    admin: SinkAdmin

    def app_id(self, app_id: str) -> str:
        return member_app_id(app_id, self.name)


def fanned_out(argv: Sequence[str]) -> bool:
    """Whether ``argv`` names more than one sink."""
    return sum(1 for a in argv if a == "--sink" or a.startswith("--sink=")) > 1


def _segments(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The arguments before the first ``--sink``, and each ``--sink VALUE`` with the arguments up to the next."""
    head: list[str] = []
    segments: list[tuple[str, list[str]]] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--sink" or arg.startswith("--sink="):
            if arg == "--sink":
                if i + 1 >= len(args):
                    raise Usage("--sink needs a value: KIND or NAME=KIND")
                value, i = args[i + 1], i + 2
            else:
                value, i = arg.split("=", 1)[1], i + 1
            segments.append((value, []))
        else:
            (segments[-1][1] if segments else head).append(arg)
            i += 1
    return head, segments


def run_fanout(
    name: str,
    description: str,
    argv: Sequence[str],
    add: Callable[[argparse.ArgumentParser], None],
    body: Callable[[argparse.Namespace, list[Member]], int],
) -> int:
    """Parse a fan-out's command line (see the module docstring) and run ``body`` with its sinks, in order."""
    from eosink.profiles import get_profile, profile_names

    kinds = profile_names("admin")
    try:
        head, segments = _segments(argv)
        rest = list(head)
        parsed: list[tuple[str, str, Any, argparse.Namespace]] = []
        for value, options in segments:
            member, _, kind = value.rpartition("=")
            if kind not in kinds:
                raise Usage(f"unknown sink kind {kind!r} in --sink {value}: one of {', '.join(kinds)}")
            profile = get_profile(kind)
            own = argparse.ArgumentParser(prog=f"eosink {name} --sink {value}", add_help=False)
            profile.add_arguments(own)
            ns, extra = own.parse_known_args(options)
            rest += extra
            parsed.append((member or kind, kind, profile, ns))
        names = [n for n, *_ in parsed]
        if len(set(names)) != len(names):
            raise Usage(f"two sinks named alike in {names}: name them, --sink NAME=KIND, as the query does")
        bad = [n for n in names if not valid_name(n)]
        if bad:
            raise Usage(f"sink name {bad[0]!r} is not a name of letters, digits, '-' and '_' (--sink NAME=KIND)")
        ap = argparse.ArgumentParser(prog=f"eosink {name}", description=description)
        add(ap)
        args = ap.parse_args(rest)
    except Usage as exc:
        print(f"eosink {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if not args.app_id:
        print(f"eosink {name}: a fan-out needs --app-id: its sinks' app_ids are <app-id>.<name>", file=sys.stderr)
        return EXIT_USAGE
    return _with_admins(name, parsed, args, body)


def _with_admins(
    name: str,
    parsed: list[tuple[str, str, Any, argparse.Namespace]],
    args: argparse.Namespace,
    body: Callable[[argparse.Namespace, list[Member]], int],
) -> int:
    """Build each sink's admin in turn (through :func:`eosink.cli._common.run`, for its error handling and
    scrubbing), then run ``body`` with all of them."""
    members: list[Member] = []

    def nest(index: int) -> int:
        if index == len(parsed):
            try:
                return body(args, members)
            except EosinkError as exc:  # printed by the innermost run(), which scrubs only its own sink's secrets
                fix = None if exc.fix is None else _scrubbed(exc.fix, members)
                raise type(exc)(_scrubbed(exc.problem, members), fix) from None
        member, kind, profile, ns = parsed[index]
        ns.profile = profile

        def step(_: argparse.Namespace, admin: SinkAdmin) -> int:
            members.append(Member(member, kind, admin))
            return nest(index + 1)

        return run(name, step, ns)

    return nest(0)


def _scrubbed(text: str, members: Sequence[Member]) -> str:
    for member in members:
        text = member.admin.scrub(text)
    return text
