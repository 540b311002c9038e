"""End to end: `eosink new-connector` renders a package that installs, lints and passes its tests.

1. Build eosink's wheel and install it (with the ``contracts`` extra) into a clean virtualenv,
   so the template is rendered from an installed wheel, not from the source tree.
2. Render ``demo_sink`` with that environment's ``eosink new-connector ... --no-input``, plus a
   name of the maximum length, and check both renderings: no Jinja left, ruff and mypy --strict
   clean (with this environment's ruff and mypy, when present); an invalid name is refused.
3. Install the rendered package with its ``test`` extra and run its tests with pytest: the
   example sink's own tests and eosink's whole contract suite.

Exits non-zero on the first failure, with the failing command's output. Prints each step's time.
Usage: ``python tests/template/check_template.py [--keep]`` (--keep leaves the temporary directory).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "demo_sink"
LONGEST = "abcdefghij_abcdefghij_abcdefghij"  # the longest name new-connector accepts (32)
TOOLS = Path(sys.executable).parent


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"FAILED ({out.returncode}): {' '.join(map(str, cmd))}\n{out.stdout[-6000:]}\n{out.stderr[-6000:]}")
    return out.stdout


class Steps:
    """Times each step and prints it as it finishes."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def done(self, what: str, since: float) -> float:
        now = time.monotonic()
        print(f"  {now - since:6.1f} s  {what}", flush=True)
        return now


def lint(project: Path, *, types: bool = True) -> list[str]:
    """ruff check, ruff format --check and (``types``) mypy --strict of a rendered project; the tools that ran."""
    leftovers = [str(p) for p in project.rglob("*") if p.is_file() and "{{" in p.read_text() + p.name]
    if leftovers:
        sys.exit(f"FAILED: unrendered Jinja in {leftovers}")
    ran = []
    for tool, args in (("ruff", ["check", "-q", "."]), ("ruff", ["format", "--check", "-q", "."])):
        if (TOOLS / tool).exists():
            run(TOOLS / tool, *args, cwd=project)
            ran.append(f"{tool} {args[0]}")
    if types and (TOOLS / "mypy").exists():  # this environment has eosink; the project's own pyproject sets strict
        run(TOOLS / "mypy", "--cache-dir", ROOT / ".mypy_cache" / "rendered-template", "src", "tests", cwd=project)
        ran.append("mypy --strict")
    return ran


def main() -> None:
    keep = "--keep" in sys.argv[1:]
    steps = Steps()
    tmp = Path(tempfile.mkdtemp(prefix="eosink-template-"))
    try:
        t = steps.start
        dist = tmp / "dist"
        run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, ROOT)
        (wheel,) = dist.glob("*.whl")
        t = steps.done(f"built {wheel.name}", t)

        env_dir = tmp / "venv"
        py = env_dir / "bin" / "python"
        uv = shutil.which("uv", path=str(TOOLS))
        if uv:  # same result as venv + pip, several times faster with a warm cache
            run(uv, "venv", "-q", "--python", sys.executable, env_dir)
            install = [uv, "pip", "install", "-q", "--python", str(py)]
        else:
            venv.create(env_dir, with_pip=True)
            install = [str(py), "-m", "pip", "install", "-q"]
        constraints = ["-c", str(ROOT / "constraints.txt")]
        run(*install, *constraints, f"{wheel}[contracts]")
        t = steps.done("clean virtualenv with the wheel and its contracts extra", t)

        out = tmp / "render"
        for name in (NAME, LONGEST):
            run(env_dir / "bin" / "eosink", "new-connector", name, "--output-dir", out, "--no-input")
        project = out / NAME
        expected = ["pyproject.toml", f"src/{NAME}/sink.py", "tests/test_contract.py", "tests/test_sink.py"]
        missing = [f for f in expected if not (project / f).is_file()]
        if missing:
            sys.exit(f"FAILED: the rendered project lacks {missing}")
        bad = subprocess.run(
            [env_dir / "bin" / "eosink", "new-connector", "Bad-Name", "--output-dir", out, "--no-input"],
            capture_output=True,
            text=True,
            check=False,
        )
        if bad.returncode != 2 or "'bad_name'" not in bad.stderr or (out / "Bad-Name").exists():
            sys.exit(f"FAILED: an invalid name was not refused with a suggestion:\n{bad.stdout}{bad.stderr}")
        t = steps.done(f"rendered {NAME} and {LONGEST} from the installed wheel; refused Bad-Name", t)

        ran = lint(project) + lint(out / LONGEST, types=False)  # line lengths
        t = steps.done(f"rendered code is clean ({', '.join(sorted(set(ran))) or 'no linters here'})", t)

        run(*install, *constraints, f"{project}[test]")
        t = steps.done(f"installed {NAME}[test]", t)

        report = run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-r", "fE", cwd=project)
        summary = [line for line in report.splitlines() if line.strip()][-1]
        steps.done(f"the rendered package's tests: {summary}", t)
        print(f"template ok in {time.monotonic() - steps.start:.1f} s")
    finally:
        if keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
