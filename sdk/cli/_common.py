"""What ``eosink status`` and ``eosink recover`` share: the sink's options from its profile, errors, tables."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from eosink.admin import SinkAdmin
from eosink.errors import EosinkError

__all__ = ["EXIT_FAIL", "EXIT_OK", "EXIT_USAGE", "Usage", "age", "command", "opt", "parse", "run", "table"]

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class Usage(Exception):
    """A usage error found after parsing (exit 2)."""


def parse(
    prog: str, description: str, epilog: str, argv: list[str], add: Callable[[argparse.ArgumentParser], None]
) -> argparse.Namespace:
    """Parse ``argv``: ``--sink`` first (its choices are the profiles), then that sink's own options.

    ``add`` adds the command's options. ``--help`` without ``--sink`` lists the sinks; with it,
    the sink's options too. Exits like argparse (0 for help, 2 for usage).
    """
    from eosink.profiles import get_profile, profile_names

    def parser(sink_options: Callable[[argparse.ArgumentParser], None] | None, note: str) -> argparse.ArgumentParser:
        ap = argparse.ArgumentParser(prog=prog, description=description, epilog=f"{epilog} {note}".strip())
        ap.add_argument("--sink", required=True, choices=profile_names("admin"), help="the kind of sink")
        if sink_options is not None:
            sink_options(ap)
        add(ap)
        return ap

    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--sink")
    known, _ = first.parse_known_args(argv)
    if known.sink not in profile_names("admin"):
        sinks = "; ".join(f"{n}: {get_profile(n).summary}" for n in profile_names("admin"))
        return parser(None, f"Sinks: {sinks}. Give --sink NAME --help for the sink's own options.").parse_args(argv)
    profile = get_profile(known.sink)
    args = parser(profile.add_arguments, profile.secrets_note()).parse_args(argv)
    args.profile = profile
    return args


def command(
    name: str,
    description: str,
    epilog: str,
    argv: Sequence[str],
    add: Callable[[argparse.ArgumentParser], None],
    body: Callable[[argparse.Namespace, SinkAdmin], int],
) -> int:
    """``eosink NAME ...``: parse (exit 0 for ``--help``, 2 for a usage error), then :func:`run` ``body``."""
    try:
        parsed = parse(f"eosink {name}", description, epilog, list(argv), add)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return run(name, body, parsed)


def run(command: str, body: Callable[[argparse.Namespace, SinkAdmin], int], parsed: Any) -> int:
    """Build the sink's admin from the parsed options and run ``body``; errors print as one line (secrets
    scrubbed) and give exit 1, usage errors exit 2."""
    scrub: Callable[[str], str] = str
    admin: SinkAdmin | None = None
    try:
        try:
            admin = parsed.profile.admin(parsed)
        except EosinkError as exc:  # the options name no sink: a usage error
            raise Usage(exc.problem if exc.fix is None else f"{exc.problem} Fix: {exc.fix}") from None
        scrub = admin.scrub
        return body(parsed, admin)
    except Usage as exc:
        print(f"eosink {command}: {scrub(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except EosinkError as exc:
        text = exc.problem if exc.fix is None else f"{exc.problem}\nFix: {exc.fix}"
        print(f"eosink {command}: error: {scrub(text)}", file=sys.stderr)
        return EXIT_FAIL
    finally:
        if admin is not None:
            admin.close()


def opt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def age(seconds: float) -> str:
    """``42s``, ``5m 07s``, ``3h 02m``, ``2d 04h``: an age a person reads at a glance."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
