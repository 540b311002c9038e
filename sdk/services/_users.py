"""Run a server as an unprivileged user when the harness runs as root (PostgreSQL refuses root).

No user is created and no directory outside the harness's own is re-permissioned: the
server runs as ``$EOSINK_SERVICES_USER``, else ``postgres``, else ``nobody``, and what it
needs is placed where that user can reach it — the cache if its parents are traversable,
else a private directory under the system's temporary directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from eosink.errors import ServiceError
from eosink.services._layout import cache_lock, cache_root

__all__ = ["ServiceUser", "service_user"]

CANDIDATES = ("postgres", "nobody")


class ServiceUser:
    """The (uid, gid) a server runs as, and how to give it a directory or files it can use."""

    def __init__(self, name: str, uid: int, gid: int) -> None:
        self.name, self.uid, self.gid = name, uid, gid

    @property
    def ids(self) -> tuple[int, int]:
        """(uid, gid) for :func:`eosink.services._process.spawn`."""
        return self.uid, self.gid

    def can_reach(self, path: Path) -> bool:
        """Whether this user can traverse every parent of ``path`` and read (and enter) ``path``."""
        try:
            target = path.stat()
        except OSError:
            return False
        wanted = (stat.S_IROTH | stat.S_IXOTH) if stat.S_ISDIR(target.st_mode) else stat.S_IROTH
        if not self._allows(target, wanted):
            return False
        return all(self._allows(parent.stat(), stat.S_IXOTH) for parent in path.parents)

    def _allows(self, st: os.stat_result, other_bits: int) -> bool:
        shift = 6 if st.st_uid == self.uid else 3 if st.st_gid == self.gid else 0
        bits = other_bits << shift
        return st.st_mode & bits == bits

    def private_dir(self, preferred: Path, label: str) -> Path:
        """A fresh directory owned by this user: ``preferred`` if reachable, else one under the temp dir."""
        parent = preferred.parent
        if not self.can_reach(parent):
            parent = _fallback_root() / label
            parent.mkdir(parents=True, exist_ok=True)
        target = parent / preferred.name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(mode=0o700)
        os.chown(target, self.uid, self.gid)
        return target

    def discard(self, preferred: Path, label: str) -> None:
        """Remove the fallback directory :meth:`private_dir` may have made for ``preferred``."""
        fallback = _fallback_root() / label
        if fallback.exists():
            shutil.rmtree(fallback, ignore_errors=True)
        with contextlib.suppress(OSError):
            _fallback_root().rmdir()  # only if nothing else is kept there

    def reachable_copy(
        self, tree: Path, label: str, *, companions: Sequence[Path] = (), probe: Sequence[str] = ()
    ) -> Path:
        """``tree`` itself if this user can use it, else a copy it can (made once, checked, kept).

        ``companions`` are directories the tree's programs need beside it, e.g. a wheel's
        ``<package>.libs`` that its binaries find through ``$ORIGIN/../../../<package>.libs``:
        they are copied too, at the same places relative to ``tree``. ``probe`` is a command
        (relative to the copy) that must run as this user, e.g. ``("bin/initdb", "--version")``;
        a copy is marked complete only once the probe passed, and a complete copy whose probe
        fails (a source that changed, a damaged copy) is made again once.
        """
        if self.can_reach(tree) and all(self.can_reach(c) for c in companions):
            return tree
        with cache_lock(f"copy-{self.name}-{label}"):
            return self._copy(tree, label, companions, probe)

    def _copy(self, tree: Path, label: str, companions: Sequence[Path], probe: Sequence[str]) -> Path:
        base = Path(os.path.commonpath([tree, *companions])) if companions else tree.parent
        root = _fallback_root() / label
        copy = root / tree.relative_to(base)
        marker = root / ".complete"
        source = "\n".join(str(p) for p in (tree, *companions))
        if marker.exists() and marker.read_text() == source and self._probe(copy, probe) is None:
            return copy
        if root.exists():
            shutil.rmtree(root)
        for part in (tree, *companions):
            shutil.copytree(part, root / part.relative_to(base), symlinks=True)
        os.chmod(root, 0o755)
        problem = self._probe(copy, probe)
        if problem is not None:
            shutil.rmtree(root, ignore_errors=True)
            raise ServiceError(
                f"A copy of {tree} made for the user {self.name!r} (who cannot enter the original's directory) "
                f"does not run as that user: {problem}",
                "install eosink's test dependencies where other users can read them (e.g. a virtualenv outside a "
                "0700 home directory), or set EOSINK_SERVICES_USER to a user who can.",
            )
        marker.write_text(source)
        return copy

    def _probe(self, copy: Path, probe: Sequence[str]) -> str | None:
        """None if ``probe`` (its program relative to ``copy``) runs as this user, else what went wrong."""
        if not probe:
            return None if copy.exists() else f"{copy} is missing"
        argv = [os.fspath(copy / probe[0]), *probe[1:]]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
                user=self.uid,
                group=self.gid,
                extra_groups=[],
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"{' '.join(argv)}: {exc}"
        if done.returncode != 0:
            return f"{' '.join(argv)} exited with {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}"
        return None


def fallback_root_path() -> Path:
    """``<tmp>/eosink-<hash of the cache path>``: where the service user's copies and data go when it cannot
    reach the cache (a 0700 home); nothing else of eosink lives outside the cache."""
    tag = hashlib.sha256(str(cache_root()).encode()).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"eosink-{tag}"


def purge_fallback_root() -> Path | None:
    """Remove :func:`fallback_root_path` if it exists and is ours (no server may run from it); the removed path."""
    root = fallback_root_path()
    if not root.exists() or root.stat().st_uid != os.geteuid():
        return None
    shutil.rmtree(root, ignore_errors=True)
    return root


def _fallback_root() -> Path:
    """:func:`fallback_root_path`, world-traversable, created by us (0755)."""
    root = fallback_root_path()
    root.mkdir(mode=0o755, exist_ok=True)
    if root.stat().st_uid != os.geteuid():
        raise ServiceError(
            f"{root} belongs to another user.", "remove it, or set EOSINK_CACHE to a directory other users can reach."
        )
    return root


def service_user() -> ServiceUser | None:
    """The unprivileged user to run servers as, or None when not running as root."""
    if os.geteuid() != 0:
        return None
    names = [os.environ["EOSINK_SERVICES_USER"]] if os.environ.get("EOSINK_SERVICES_USER") else list(CANDIDATES)
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return ServiceUser(name, entry.pw_uid, entry.pw_gid)
    raise ServiceError(
        f"Running as root, and none of the users {', '.join(names)} exists to run PostgreSQL as.",
        "create an unprivileged user and set EOSINK_SERVICES_USER to its name, or run as an ordinary user.",
    )
