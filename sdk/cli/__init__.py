"""The ``eosink`` command line: one module per subcommand.

``demo``, ``services``, ``new-connector``, ``chaos`` and ``bench`` hand their arguments to their
own modules; ``status`` (:mod:`eosink.cli.status`) and ``recover`` (:mod:`eosink.cli.recover`)
are the operator's view of a sink, whichever sink: its options come from its profile
(:mod:`eosink.profiles`).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

__all__ = ["COMMANDS", "exit_on_sigterm", "main"]


def exit_on_sigterm() -> None:
    """Let SIGTERM unwind the command as Ctrl-C does, so that the servers, brokers and Spark drivers it
    started are stopped by its own cleanup instead of outliving it (exit status 143).

    Only the first SIGTERM unwinds; a second one, during the cleanup, ends the process at once."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _unwind)


def _unwind(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise SystemExit(128 + signum)


def _services(argv: list[str]) -> int:
    from eosink.services.cli import main as run

    return run(argv)


def _new_connector(argv: list[str]) -> int:
    try:
        from eosink.contracts.new_connector import main as run
    except ImportError as e:  # eosink.contracts needs pytest and hypothesis
        print(f"eosink new-connector: {e}. Fix: pip install 'eosink[contracts]'", file=sys.stderr)
        return 2
    return run(argv)


def _demo(argv: list[str]) -> int:
    from eosink.demo import demo_main

    return demo_main(argv)


def _bench(argv: list[str]) -> int:
    from eosink.bench.cli import main as run

    return run(argv)


def _chaos(argv: list[str]) -> int:
    from eosink.chaos.cli import main as run

    return run(argv)


def _status(argv: list[str]) -> int:
    from eosink.cli.status import main as run

    return run(argv)


def _recover(argv: list[str]) -> int:
    from eosink.cli.recover import main as run

    return run(argv)


COMMANDS: dict[str, tuple[Callable[[list[str]], int], str]] = {
    "demo": (_demo, "crash a streaming job, prove the result"),
    "services": (_services, "up|check|down|status|env the test servers"),
    "new-connector": (_new_connector, "NAME: render a new connector package"),
    "status": (_status, "a sink's last batches and in-doubt work"),
    "recover": (_recover, "resolve in-doubt work (fences the app_id)"),
    "chaos": (_chaos, "the end-to-end chaos harness"),
    "bench": (_bench, "eosink against Spark's built-in writers on the same data"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """``eosink COMMAND [...]``; ``eosink --version``."""
    exit_on_sigterm()
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in COMMANDS:  # the command's own parser sees --help
        return _run(args[0], args[1:])
    parser = argparse.ArgumentParser(prog="eosink", description="End-to-end exactly-once sinks for Spark.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "command", nargs="?", choices=list(COMMANDS), help="; ".join(f"{n}: {h}" for n, (_, h) in COMMANDS.items())
    )
    known, rest = parser.parse_known_args(args)
    if known.version:
        from eosink import __version__

        print(f"eosink {__version__}")
        return 0
    if known.command is not None:
        return _run(known.command, rest)
    parser.print_help()
    return 2


def _run(name: str, argv: list[str]) -> int:
    """Command ``name``; a connector's client library missing (its extra not installed) is one line naming the
    extra, exit 1, not a traceback."""
    from eosink._extras import from_missing_module

    try:
        return COMMANDS[name][0](argv)
    except ModuleNotFoundError as exc:
        missing = from_missing_module(exc)
        if missing is None:
            raise
        print(f"eosink {name}: error: {missing.problem}\nFix: {missing.fix}", file=sys.stderr)
        return 1
