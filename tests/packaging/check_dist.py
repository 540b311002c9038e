"""Build the wheel and sdist, install the wheel into a clean virtualenv, import it, type-check it.

Proves the folder-to-package mapping (sdk/ -> eosink, connectors/ -> eosink.connectors,
contracts/ -> eosink.contracts) survives packaging, and that py.typed ships.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = [
    "eosink/__init__.py",
    "eosink/py.typed",
    "eosink/contract.py",
    "eosink/errors.py",
    "eosink/connectors/__init__.py",
    "eosink/connectors/reference/sink.py",
    "eosink/contracts/__init__.py",
]


def run(*cmd: str, cwd: Path | None = None) -> str:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"FAILED: {' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="eosink-dist-") as tmp:
        dist = Path(tmp) / "dist"
        run(sys.executable, "-m", "build", "--wheel", "--sdist", "--outdir", str(dist), str(ROOT))
        wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
        assert len(wheels) == 1 and len(sdists) == 1, f"expected one wheel and one sdist, got {list(dist.iterdir())}"
        names = set(zipfile.ZipFile(wheels[0]).namelist())
        missing = [n for n in EXPECTED if n not in names]
        assert not missing, f"wheel lacks {missing}"
        stray = sorted(n for n in names if n.split("/")[0] in {"sdk", "connectors", "contracts", "tests"})
        assert not stray, f"wheel ships source folders under their own names: {stray[:5]}"

        env_dir = Path(tmp) / "venv"
        py = str(env_dir / "bin" / "python")
        uv = shutil.which("uv", path=str(Path(sys.executable).parent))
        if uv:  # same result as venv + pip, several times faster with a warm cache
            run(uv, "venv", "-q", "--python", sys.executable, str(env_dir))
            install = [uv, "pip", "install", "-q", "--python", py]
        else:
            venv.create(env_dir, with_pip=True)
            install = [py, "-m", "pip", "install", "-q"]
        run(*install, str(wheels[0]))
        probe = (
            "import eosink, eosink.errors, eosink.connectors.reference, eosink.contracts;"
            "from eosink import Sink, foreach_batch, TwoPhaseCommit, TxidCheck, Idempotent;"
            "print(eosink.__file__)"
        )
        where = run(py, "-c", probe).strip()
        assert "site-packages" in where, f"imported from {where}, not the installed wheel"
        run(*install, "mypy")
        Path(tmp, "use.py").write_text("import eosink\nw: eosink.Sink[object] | None = None\n")
        run(str(env_dir / "bin" / "mypy"), "--strict", "use.py", cwd=Path(tmp))
    print(f"packaging ok: {wheels[0].name}, {sdists[0].name}; wheel installs, imports and type-checks (py.typed)")


if __name__ == "__main__":
    main()
