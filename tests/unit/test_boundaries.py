"""The seams between the core, the connectors and the tooling hold, checked by walking every import.

* No module outside a connector's folder (``connectors/<name>/``, with its tests in
  ``tests/connectors/<name>/`` and its micro-benchmarks in ``benchmarks/<name>_*.py``) imports that
  connector's private (``_``) modules: tooling reaches a connector through its public modules and
  its profile.
* No connector imports another connector.
* The core (the contract, the protocol, the Spark integration) imports no tooling and no connector.
* Nothing outside ``eosink.coordinator`` touches a Coordinator's private members.
"""

from __future__ import annotations

import ast
import importlib.metadata
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOTS = {"sdk": "eosink", "connectors": "eosink.connectors", "contracts": "eosink.contracts"}
SCANNED = ["sdk", "connectors", "contracts", "tests", "examples", "benchmarks"]
CORE = [
    "eosink.admin",
    "eosink.checkpoint",
    "eosink.contract",
    "eosink.coordinator",
    "eosink.errors",
    "eosink.faults",
    "eosink.fingerprint",
    "eosink.keys",
    "eosink.participant",
    "eosink.recovery",
    "eosink.spark",
    "eosink.strategies",
    "eosink._rowhash",
    "eosink._waiting",
    "eosink._watcher",
]
TOOLING = ("eosink.bench", "eosink.chaos", "eosink.demo", "eosink.services", "eosink.cli", "eosink.contracts")


def _files() -> Iterator[Path]:
    for folder in SCANNED:
        for path in (ROOT / folder).rglob("*.py"):
            if "template" not in path.parts and "__pycache__" not in path.parts:
                yield path


def _module_name(path: Path) -> str | None:
    rel = path.relative_to(ROOT)
    package = PACKAGE_ROOTS.get(rel.parts[0])
    if package is None:
        return None
    parts = [*package.split("."), *rel.with_suffix("").parts[1:]]
    return ".".join(p for p in parts if p != "__init__")


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module or module.name) of every import in ``path``, function-level ones included."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_name(path) or ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package, then up level - 1
                package = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _owner(path: Path) -> str | None:
    """The connector a file belongs to: its folder, its tests' folder, or its micro-benchmarks of its own
    internals (``benchmarks/<connector>_*.py``)."""
    rel = path.relative_to(ROOT).parts
    if rel[0] == "connectors" and len(rel) > 2:
        return rel[1]
    if rel[:2] == ("tests", "connectors") and len(rel) > 3:
        return rel[2]
    if rel[0] == "benchmarks" and len(rel) == 2 and "_" in rel[1]:
        return rel[1].split("_", 1)[0]
    return None


def test_no_module_outside_a_connector_imports_its_private_modules() -> None:
    """Pass: every ``eosink.connectors.<c>._private`` import comes from ``<c>``'s own folder or tests."""
    found = []
    for path in _files():
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[:2] != ["eosink", "connectors"] or len(parts) < 4:
                continue
            connector, module = parts[2], parts[3]
            if module.startswith("_") and not module.startswith("__") and _owner(path) != connector:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not found, "\n".join(found)


def test_no_connector_imports_another() -> None:
    found = []
    for path in _files():
        owner = _owner(path)
        if owner is None or path.relative_to(ROOT).parts[0] != "connectors":
            continue
        for line, name in _imports(path):
            parts = name.split(".")
            if parts[:2] == ["eosink", "connectors"] and len(parts) > 2 and parts[2] not in (owner, "__init__"):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("module", CORE)
def test_the_core_imports_no_tooling_and_no_connector(module: str) -> None:
    """Pass: the core module imports nothing of the tooling (bench, chaos, demo, services, cli, contracts,
    profiles) or of eosink.connectors, not even inside a function."""
    rel = module.removeprefix("eosink.").replace(".", "/")
    path = ROOT / "sdk" / f"{rel}.py"
    bad = [
        f"{line}: {name}"
        for line, name in _imports(path)
        if name.startswith((*TOOLING, "eosink.connectors", "eosink.profiles"))
    ]
    assert not bad, f"{module} imports tooling: {bad}"


def test_nothing_outside_the_coordinator_touches_its_private_members() -> None:
    """Pass: no ``<coordinator>._member`` attribute access outside eosink.coordinator (a heuristic on names:
    variables and attributes called ``coordinator`` or ``_coordinator``)."""
    found = []
    for path in _files():
        if path.relative_to(ROOT).as_posix() == "sdk/coordinator.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name.lstrip("_") == "coordinator":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert not found, "\n".join(found)


def test_every_entry_point_the_package_declares_loads() -> None:
    """An entry point naming a module that is not shipped fails only when a user reaches it (a
    checkpoint URL scheme, a sink name): load each one the installed package declares."""
    found = list(importlib.metadata.distribution("eosink").entry_points)
    assert any(ep.group == "console_scripts" for ep in found), "the installed metadata has no eosink command"
    for ep in found:
        ep.load()
