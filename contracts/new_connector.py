"""``eosink new-connector NAME``: a new connector package, rendered from the bundled cookiecutter template.

The package holds a working example sink (JSON-lines files in a directory, the whole contract
with prepare), its configuration class, eosink's contract suite adopted in one line, direct unit
tests, and a README mapping each method of the example to what a real store does.
"""

from __future__ import annotations

import argparse
import keyword
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from eosink.errors import ConfigurationError, EosinkError

__all__ = ["TEMPLATE", "main", "render", "validate_name"]

TEMPLATE = Path(__file__).resolve().parent / "template"
"""The cookiecutter template: a data-only folder shipped in the wheel (its .py files are Jinja templates)."""

_SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
_MAX_LEN = 32  # keeps the rendered code within ruff's 120 columns


def validate_name(name: str) -> str:
    """``name`` if it can be the connector's package name; else ConfigurationError with a suggestion."""
    suggestion = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    if not suggestion or not suggestion[0].isalpha():
        suggestion = f"sink_{suggestion}".rstrip("_")
    fix = (
        f"Use at most {_MAX_LEN} lowercase letters, digits and single underscores, starting with a letter, "
        f"e.g. {suggestion[:_MAX_LEN]!r}."
    )
    if not _SNAKE.fullmatch(name) or len(name) > _MAX_LEN:
        raise ConfigurationError(f"{name!r} is not a valid connector name: it becomes the Python package name.", fix)
    if keyword.iskeyword(name) or name in sys.stdlib_module_names or name == "eosink":
        raise ConfigurationError(
            f"{name!r} is not a valid connector name: it would shadow "
            f"{'a Python keyword' if keyword.iskeyword(name) else 'an existing module'}.",
            f"Choose a more specific name, e.g. {name + '_sink'!r}.",
        )
    return name


def render(name: str, output_dir: Path, *, no_input: bool = False) -> Path:
    """Render the template for connector ``name`` into ``output_dir``; the new project's directory."""
    validate_name(name)
    try:
        from cookiecutter.exceptions import FailedHookException, OutputDirExistsException
        from cookiecutter.main import cookiecutter
    except ImportError as e:
        raise ConfigurationError(
            "cookiecutter, which renders the connector template, is not installed.", "pip install 'eosink[contracts]'"
        ) from e
    if not (TEMPLATE / "cookiecutter.json").is_file():
        raise ConfigurationError(
            f"The connector template is missing from this installation of eosink ({TEMPLATE}).", "Reinstall eosink."
        )
    from eosink import __version__

    # Used as a library, cookiecutter would log a traceback for a refused name; our error says it all.
    logging.getLogger("cookiecutter").addHandler(logging.NullHandler())
    try:
        project = cookiecutter(
            str(TEMPLATE),
            no_input=no_input,
            extra_context={"connector_name": name, "_eosink_version": __version__},
            output_dir=str(output_dir),
        )
    except FailedHookException as e:  # hooks/pre_gen_project.py refused a name given at a prompt
        raise ConfigurationError(
            "A name given at a prompt cannot be a Python package or class name (see above).",
            "Run it again with valid answers.",
        ) from e
    except OutputDirExistsException as e:
        problem = str(e).removeprefix("Error: ").rstrip(".")
        raise ConfigurationError(
            f"Cannot create the package: {problem}.", "Choose another --output-dir, or remove it."
        ) from e
    return Path(project).resolve()


def main(argv: Sequence[str] | None = None) -> int:
    """The ``eosink new-connector`` command: 0 on success, 2 on a usage or configuration error."""
    parser = argparse.ArgumentParser(
        prog="eosink new-connector",
        description="Render a new eosink connector package: a working example sink, its configuration, "
        "the contract suite adopted in one line, and tests.",
    )
    parser.add_argument("name", help="the connector's name, lowercase snake_case (its package name), e.g. demo_sink")
    parser.add_argument(
        "--output-dir", "-o", type=Path, default=Path("."), help="where to create the package (default: here)"
    )
    parser.add_argument(
        "--no-input", action="store_true", help="do not prompt; use the defaults for author and description"
    )
    args = parser.parse_args(argv)
    no_input = args.no_input or not sys.stdin.isatty()  # nobody could answer the prompts
    try:
        project = render(args.name, args.output_dir, no_input=no_input)
    except EosinkError as e:
        print(f"eosink new-connector: {e}", file=sys.stderr)
        return 2
    package = project / "src" / project.name
    print(f"Created the connector package {project.name} in {project}")
    print(
        "Next steps:\n"
        f"  cd {project}\n"
        "  python -m venv .venv && . .venv/bin/activate\n"
        "  pip install -e '.[test]'\n"
        "  pytest -q    # eosink's contract suite and the example sink's own tests\n"
        f"Then make the example in {package / 'sink.py'} write to your store, method by method:\n"
        f"{project / 'README.md'} maps each one, and the contract suite tells you whether it is still exactly-once."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
