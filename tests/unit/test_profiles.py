"""Sink profiles: the tooling finds every sink through them, and a new one needs no other file edited."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eosink.errors import ConfigurationError
from eosink.profiles import TOOLS, get_profile, profile_names, profiles

THROWAWAY = """
import argparse
from pathlib import Path
from typing import Any

from eosink.profiles import SinkProfile


class ThrowawayProfile(SinkProfile):
    name = "throwaway"
    title = "Throwaway"
    summary = "a sink that exists only in this test"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--bucket-of-holding", required=True)

    def admin(self, args: argparse.Namespace) -> Any:
        raise NotImplementedError

    def chaos_target(self, root: Path | None = None) -> Any:
        raise NotImplementedError

    def bench_adapter(self) -> Any:
        raise NotImplementedError


PROFILE = ThrowawayProfile()
"""


def test_the_connectors_profiles_are_found_by_scanning_their_folders() -> None:
    """Pass: postgres and reference are found with no list kept anywhere; each offers what it implements."""
    found = profiles()
    assert {"postgres", "reference"} <= set(found)
    assert get_profile("postgres").offers("chaos_target") and get_profile("postgres").offers("bench_adapter")
    assert not get_profile("reference").offers("chaos_target") and get_profile("reference").offers("contract_harness")
    assert "reference" not in profile_names("demo_target") and "postgres" in profile_names("demo_target")
    for profile in found.values():
        assert profile.name and profile.title and profile.summary
        assert all(isinstance(profile.offers(tool), bool) for tool in TOOLS)


def test_an_unknown_sink_or_a_missing_part_is_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match="no sink called 'nosuch'") as err:
        get_profile("nosuch")
    assert err.value.fix is not None and "postgres" in err.value.fix
    with pytest.raises(ConfigurationError, match="offers no chaos target"):
        get_profile("reference", "chaos_target")


def test_a_throwaway_sink_profile_is_offered_everywhere_with_no_other_file_edited(tmp_path: Path) -> None:
    """A connector in a distribution of its own registers its profile in the ``eosink.sinks`` entry points.

    How: a module and its dist-info (an entry point only) in a fresh folder on PYTHONPATH, nothing else
    touched. Pass: ``eosink status --help``, ``eosink chaos --help`` and ``eosink bench --help`` offer
    the sink, and ``eosink status --sink throwaway --help`` shows the profile's own option.
    """
    (tmp_path / "throwaway_sink.py").write_text(THROWAWAY)
    info = tmp_path / "throwaway_sink-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: throwaway-sink\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[eosink.sinks]\nthrowaway = throwaway_sink:PROFILE\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}

    def help_of(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "eosink.cli", *argv, "--help"], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    assert "throwaway" in help_of("status") and "a sink that exists only in this test" in help_of("recover")
    assert "throwaway" in help_of("chaos")
    assert "throwaway" in help_of("bench")
    assert "--bucket-of-holding" in help_of("status", "--sink", "throwaway")
    assert "throwaway" not in help_of("demo"), "a profile without a demo target is not offered by the demo"


def test_every_sink_is_in_the_readmes_list_of_connectors_and_its_docs_page_in_the_site() -> None:
    """The docs' list of connectors follows the profiles: a new sink fails this until it is documented.

    Pass: each profile's ``--sink`` name is a row of the README's Connectors table, and its docs page
    exists and is in the site's navigation.
    """
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    table = readme[readme.index("## Connectors") :].split("\n## ", 1)[0]
    nav = (root / "mkdocs.yml").read_text()
    for profile in profiles().values():
        if profile.name not in profile_names() or profile.__module__.split(".")[:2] != ["eosink", "connectors"]:
            continue  # a profile of another distribution documents itself
        assert f"| `{profile.name}` |" in table, f"README's Connectors table lacks {profile.name!r}"
        assert profile.docs and (root / "docs" / profile.docs).is_file(), f"{profile.name}: docs page missing"
        assert profile.docs in nav, f"{profile.docs} is not in mkdocs.yml's nav"


@pytest.mark.parametrize(("sink", "where"), [("s3", ["--bucket", "bkt"]), ("delta", ["--table", "s3://bkt/t"])])
def test_an_admin_given_the_endpoint_keeps_the_environments_credentials_and_region(
    sink: str, where: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``eosink status --sink S --endpoint-url URL``: the flag replaces the environment's endpoint only.
    Pass: the access key, secret and region of ``EOSINK_S3_*`` are still there; ``--region`` wins over it."""
    import argparse

    monkeypatch.setenv("EOSINK_S3_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("EOSINK_S3_ACCESS_KEY", "env-key")
    monkeypatch.setenv("EOSINK_S3_SECRET_KEY", "env-secret")
    monkeypatch.setenv("EOSINK_S3_REGION", "eu-west-3")
    profile = get_profile(sink)
    for flags, region in (([], "eu-west-3"), (["--region", "ap-south-1"], "ap-south-1")):
        parser = argparse.ArgumentParser()
        profile.add_arguments(parser)
        args = parser.parse_args([*where, "--endpoint-url", "http://127.0.0.1:10", *flags])
        config = profile.admin(args).config  # type: ignore[attr-defined]
        conn = config.s3 if sink == "delta" else config.connection()
        assert (conn.endpoint_url, conn.access_key_id, conn.secret_access_key, conn.region) == (
            "http://127.0.0.1:10",
            "env-key",
            "env-secret",
            region,
        )
