"""The reference sink's profile: how ``eosink status`` and the contract suite find it."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from eosink.profiles import SinkProfile

if TYPE_CHECKING:
    from eosink.admin import SinkAdmin
    from eosink.contracts.harness import SinkHarness

__all__ = ["PROFILE", "ReferenceProfile"]


class ReferenceProfile(SinkProfile):
    """The reference sink: the whole contract on one SQLite file (tests, examples, connector authors)."""

    name = "reference"
    title = "reference (SQLite)"
    summary = "the whole sink contract on one SQLite file: for tests, examples and connector authors"
    docs = "connector-authors.md"
    datasource = ("eosink.connectors.reference", "", "ReferenceSink")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--path", required=True, help="the reference sink's SQLite file")

    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        from eosink.connectors.reference.admin import ReferenceAdmin

        return ReferenceAdmin(args.path)

    def contract_harness(self, **options: Any) -> SinkHarness:
        from eosink.connectors.reference.testing import ReferenceHarness

        return ReferenceHarness(**options)


PROFILE = ReferenceProfile()
