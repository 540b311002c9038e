"""The ``eosink`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``eosink demo [...]`` runs the exactly-once demo; ``eosink services ...`` runs the test servers;
    ``eosink new-connector NAME`` renders a new connector package."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="eosink", description="End-to-end exactly-once sinks for Spark.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "command",
        nargs="?",
        choices=["demo", "services", "new-connector"],
        help="demo: crash a streaming job, prove the result; services: up|check|down|status|env the test servers; "
        "new-connector NAME: render a new connector package",
    )
    known, rest = parser.parse_known_args(argv)
    if known.version:
        from eosink import __version__

        print(f"eosink {__version__}")
        return 0
    if known.command == "services":
        from eosink.services.cli import main as services_main

        return services_main(rest)
    if known.command == "new-connector":
        try:
            from eosink.contracts.new_connector import main as new_connector_main
        except ImportError as e:  # eosink.contracts needs pytest and hypothesis
            print(f"eosink new-connector: {e}. Fix: pip install 'eosink[contracts]'", file=sys.stderr)
            return 2
        return new_connector_main(rest)
    if known.command == "demo":
        from eosink.demo import demo_main

        return demo_main(rest)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
