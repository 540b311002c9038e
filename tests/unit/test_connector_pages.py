"""Each connector's page gets a new user from nothing to a running pipeline: what to install and a server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eosink.profiles import profiles

DOCS = Path(__file__).resolve().parents[2] / "docs" / "connectors"
PAGES = sorted(p.stem for p in DOCS.glob("*.md"))


def test_every_sink_with_a_profile_has_a_page() -> None:
    """Pass: a page per sink a user can pick (the SQLite reference sink is for tests)."""
    assert set(profiles()) - {"reference"} <= set(PAGES), sorted(profiles())


@pytest.mark.parametrize("page", PAGES)
def test_a_connector_page_says_what_to_install_and_how_to_get_a_server(page: str) -> None:
    """Pass: the page names its pip extra and starts a local server with the service harness, whose
    names are real services."""
    from eosink.services._registry import SERVICE_NAMES

    text = (DOCS / f"{page}.md").read_text()
    assert f"eosink[{page}" in text, f"{page}.md never says pip install 'eosink[{page}]'"
    started = re.findall(r"eosink services up ([\w-]+)", text)
    assert started, f"{page}.md never says how to get a server (eosink services up ...)"
    assert set(started) <= set(SERVICE_NAMES), started
