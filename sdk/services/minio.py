"""MinIO: a local S3-compatible server for the S3 connector, built from source with the Go toolchain.

What runs: ``minio server`` on one fresh data directory (single-node, single-drive), S3 API on
``127.0.0.1:<free port>`` (MinIO also listens on ``[::1]`` at that port, by design: loopback
only), its web console off and bound to 127.0.0.1, update checks and call-home off, TLS off
(an empty ``--certs-dir``), so the server makes no network calls of its own.

The pinned version: MinIO publishes no semver tags, so the Go module proxy serves it by
pseudo-version. :data:`MINIO_VERSION` is the last commit of ``github.com/minio/minio``
(2026-02-12; the project has been in maintenance mode since December 2025 and only its README
changed after November 2025). It is the last release, ``RELEASE.2025-10-15T17-29-55Z``
(source-only; it fixes CVE-2025-62506), plus that release's follow-up fixes, among them one
for conditional puts (#21653). The S3 connector commits with conditional writes
(``PutObject`` with ``If-None-Match: *``, refused with HTTP 412 when the key exists), which
MinIO handles as S3 does since spring 2024 (#19448, #19682); :meth:`MinioService.check`
proves it on every check.

Provenance: the main module's ``h1:`` hash is pinned (:data:`MINIO_SUM`) and verified before
the build, because the checksum database (sum.golang.org) may be unreachable; every
dependency is verified by the go command against MinIO's own ``go.sum`` (``-mod=readonly``:
a dependency missing from it fails the build instead of being trusted). Go's module and build
caches live in ``<cache>/go``; the binary in ``<cache>/services/minio/bin`` with a stamp, so
the build (several minutes, once) is skipped while the pinned version stays the same.

Credentials are generated at every start (``secrets``), handed to the server through its
environment, and kept only in the 0600 state file; they never appear in logs, reprs or errors.

Your own S3 endpoint (MinIO, AWS, ...) replaces the local one when ``EOSINK_S3_ENDPOINT``
is set, together with ``EOSINK_S3_ACCESS_KEY`` and ``EOSINK_S3_SECRET_KEY`` (and optionally
``EOSINK_S3_REGION``, default ``us-east-1``). Path-style addressing is used throughout.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import secrets
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eosink._secrets import scrub
from eosink.errors import ServiceError
from eosink.services._layout import cache_root
from eosink.services._minio_admin import signed_request
from eosink.services._process import Attempt, Proc, ServerProcess, free_ports, spawn, start_on_ports, stop, wait_until
from eosink.services.base import Endpoint, Service

__all__ = ["MINIO_MODULE", "MINIO_SUM", "MINIO_VERSION", "MinioServer", "MinioService", "S3Endpoint"]

log = logging.getLogger("eosink.services")

#: The Go module MinIO's server is built from.
MINIO_MODULE = "github.com/minio/minio"
#: Commit 7aac2a2c5b7c (2026-02-12): RELEASE.2025-10-15T17-29-55Z plus its follow-up fixes.
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
#: The module's ``h1:`` hash (as ``go.sum`` would record it), checked before building.
MINIO_SUM = "h1:/qdoYujxF5MBLDMVLeiYJ/7fBa1HikX39Dvzb9Ji8pA="
_COMMIT = "7aac2a2c5b7c882e68c1ce017d8256be2feea27f"
_COMMIT_TIME = "2026-02-12T20:18:48Z"


@dataclass(frozen=True)
class S3Endpoint(Endpoint):
    """An S3 API and the credentials to use it; clients must use path-style addressing."""

    endpoint_url: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    region: str = "us-east-1"

    def env(self) -> dict[str, str]:
        """``EOSINK_S3_*``: what the S3 tests and examples read."""
        return {
            "EOSINK_S3_ENDPOINT": self.endpoint_url,
            "EOSINK_S3_ACCESS_KEY": self.access_key,
            "EOSINK_S3_SECRET_KEY": self.secret_key,
            "EOSINK_S3_REGION": self.region,
        }


class MinioService(Service[S3Endpoint]):
    """MinIO built from its pinned Go module, one drive, per-run credentials."""

    name = "minio"
    endpoint_type = S3Endpoint
    override_vars: ClassVar[tuple[str, ...]] = ("EOSINK_S3_ENDPOINT", "EOSINK_S3_ACCESS_KEY", "EOSINK_S3_SECRET_KEY")

    @property
    def binary(self) -> Path:
        """The built ``minio`` executable."""
        return self.home / "bin" / "minio"

    # -- your own server -------------------------------------------------------------------

    def external(self) -> S3Endpoint | None:
        """Your S3 endpoint from ``EOSINK_S3_*``; all three of :attr:`override_vars` are then required."""
        url = os.environ.get("EOSINK_S3_ENDPOINT", "").strip()
        if not url:
            return None
        access = os.environ.get("EOSINK_S3_ACCESS_KEY", "")
        secret = os.environ.get("EOSINK_S3_SECRET_KEY", "")
        missing = [n for n, v in (("EOSINK_S3_ACCESS_KEY", access), ("EOSINK_S3_SECRET_KEY", secret)) if not v]
        if missing:
            raise ServiceError(
                f"EOSINK_S3_ENDPOINT is set ({url}), but these are not: {', '.join(missing)}.",
                "set EOSINK_S3_ACCESS_KEY and EOSINK_S3_SECRET_KEY for that endpoint, "
                "or unset EOSINK_S3_ENDPOINT to use the local MinIO.",
            )
        if not re.match(r"https?://[^/\s]+", url):
            raise ServiceError(
                f"EOSINK_S3_ENDPOINT must be an http:// or https:// URL, not {url!r}.",
                "set it to the S3 API's base URL, e.g. http://127.0.0.1:9000.",
            )
        region = os.environ.get("EOSINK_S3_REGION", "").strip() or "us-east-1"
        return S3Endpoint(url.rstrip("/"), access, secret, region)

    # -- provisioning ------------------------------------------------------------------------

    def provision(self) -> None:
        """Build ``minio`` from the pinned module (skipped when the stamp says it is built)."""
        stamp = self.binary.with_name(".version")
        wanted = f"{MINIO_MODULE}@{MINIO_VERSION} {MINIO_SUM}"
        if self.binary.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
            return
        go = shutil.which("go")
        if go is None:
            raise ServiceError(
                "MinIO is built from source with Go, and 'go' is not on PATH.",
                "install Go 1.24 or newer (https://go.dev/dl/) and run `make services-up` again.",
            )
        env = _go_env()
        started = time.monotonic()
        module_dir, required = _download_module(go, env)
        local = _go_version(go, env)
        if _version_tuple(local) >= _version_tuple(required):
            env["GOTOOLCHAIN"] = "local"
        else:
            env["GOTOOLCHAIN"] = "auto"
            log.warning(
                "[minio] Go %s is older than the %s MinIO needs: the go command will download a newer "
                "toolchain from the module proxy (this needs sum.golang.org)",
                local,
                required,
            )
        log.info(
            "[minio] building MinIO %s with Go %s (first time only: several minutes, caches in %s)",
            MINIO_VERSION,
            local,
            env["GOPATH"],
        )
        self.binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.binary.with_name(f"minio.{os.getpid()}.tmp")
        x = "-X github.com/minio/minio/cmd."
        ldflags = (
            f"-s -w {x}Version={_COMMIT_TIME} {x}ReleaseTag=DEVELOPMENT.{_COMMIT_TIME.replace(':', '-')} "
            f"{x}CommitID={_COMMIT} {x}ShortCommitID={_COMMIT[:12]} {x}CopyrightYear={_COMMIT_TIME[:4]}"
        )
        # Speed (about a third less CPU, measured): no DWARF (the binary is stripped anyway), and a
        # compiler that collects garbage less often (GOGC=400: more memory, well under 2 GB per job).
        cmd = [go, "build", "-trimpath", "-tags", "kqueue", "-gcflags=all=-dwarf=false", "-ldflags", ldflags]
        cmd += ["-o", str(tmp), "."]
        build_env = {**env, "GOGC": "400"}
        done = subprocess.run(cmd, cwd=module_dir, env=build_env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise ServiceError(
                f"Building MinIO {MINIO_VERSION} failed:\n{_tail(done.stdout + done.stderr)}",
                "check that the Go module proxy (GOPROXY, default proxy.golang.org) is reachable, "
                "then run `make services-up` again.",
            )
        os.replace(tmp, self.binary)
        stamp.write_text(wanted + "\n")
        log.info("[minio] built %s in %.0f s", self.binary, time.monotonic() - started)

    # -- starting ------------------------------------------------------------------------------

    def launch(self) -> tuple[Proc, S3Endpoint]:
        """Start ``minio server`` on fresh data with new credentials; wait until it reports ready (on fresh ports
        again if one was taken before MinIO bound it)."""
        access_key, secret_key = _credentials()
        certs = self.run / "certs"  # empty: never pick up TLS certificates from ~/.minio/certs
        certs.mkdir(exist_ok=True)
        scheme = self.certificates(certs)
        env = _server_env(access_key, secret_key)

        def start(attempt: Attempt) -> tuple[Proc, S3Endpoint]:
            port, console = attempt.ports
            endpoint = self.make_endpoint(f"{scheme}://127.0.0.1:{port}", access_key, secret_key)
            argv = _server_argv(self.binary, self.data, port, console, certs)
            proc = spawn(argv, self.log_path, env=env, cwd=self.run)
            try:
                wait_until(
                    _ready(endpoint, getattr(endpoint, "ca", None)),
                    what="MinIO",
                    proc=proc,
                    log_path=self.log_path,
                    timeout_s=self.start_timeout_s,
                    fix=f"read {self.log_path}; if the binary is broken, delete {self.home} to rebuild it.",
                    attempt=attempt,
                )
                self.started(endpoint)
            except BaseException:
                stop(proc, what="MinIO")
                raise
            return proc, endpoint

        return start_on_ports(start, free_ports(2), log_path=self.log_path, what="MinIO", may_move=True)

    def certificates(self, certs: Path) -> str:
        """Put the server's TLS files into ``certs`` (none here); the URL scheme that results (a hook)."""
        return "http"

    def make_endpoint(self, url: str, access_key: str, secret_key: str) -> S3Endpoint:
        """The endpoint of a server at ``url`` with root credentials (a hook)."""
        return S3Endpoint(url, access_key, secret_key, "us-east-1")

    def started(self, endpoint: S3Endpoint) -> None:
        """Runs once the new server is ready, before its state is recorded (a hook)."""

    # -- checking --------------------------------------------------------------------------

    def check(self, endpoint: S3Endpoint) -> str:
        """Bucket, conditional put (a second ``If-None-Match: *`` put must get 412), read back, clean up."""
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        started = time.monotonic()
        client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint.endpoint_url,
            verify=getattr(endpoint, "ca", None) or None,
            aws_access_key_id=endpoint.access_key,
            aws_secret_access_key=endpoint.secret_key,
            region_name=endpoint.region,
            config=Config(
                s3={"addressing_style": "path"},
                connect_timeout=5,
                read_timeout=30,
                retries={"mode": "standard", "max_attempts": 2},
            ),
        )
        bucket = f"eosink-check-{secrets.token_hex(6)}"
        key = "check/object.txt"
        body = secrets.token_bytes(64)
        step = "create bucket"
        created = put = False
        try:
            client.create_bucket(Bucket=bucket)
            created = True
            step = "conditional put (If-None-Match: *) of a new object"
            client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
            put = True
            step = "conditional put (If-None-Match: *) over an existing object"
            try:
                client.put_object(Bucket=bucket, Key=key, Body=b"overwritten", IfNoneMatch="*")
            except ClientError as err:
                if _status(err) != 412:
                    raise
            else:
                raise ServiceError(
                    f"S3 at {endpoint.endpoint_url} overwrote an existing object although the put said "
                    "If-None-Match: * (it must answer 412 Precondition Failed).",
                    "use an S3 server that supports conditional writes (AWS S3, or MinIO from May 2024 on).",
                )
            step = "read back the object"
            got = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            if got != body:
                raise ServiceError(
                    f"S3 at {endpoint.endpoint_url} returned other bytes than were written to {bucket}/{key}.",
                    "the server lost or replaced the object; inspect it (local MinIO: see its log).",
                )
            step = "delete the object and the bucket"
            client.delete_object(Bucket=bucket, Key=key)
            put = False
            client.delete_bucket(Bucket=bucket)
            created = False
        except (ClientError, BotoCoreError) as err:
            raise ServiceError(
                f"S3 at {endpoint.endpoint_url}: {step} failed: {_redact(str(err), endpoint)}",
                "check that the endpoint serves S3 with path-style addressing and that the credentials may "
                "create buckets (local MinIO: `eosink services down minio && eosink services up minio`).",
            ) from None
        finally:
            _cleanup(client, bucket, key if put else None, created)
        return (
            f"S3 at {endpoint.endpoint_url}: bucket, conditional put (second If-None-Match: * refused with 412), "
            f"read back, cleaned up in {time.monotonic() - started:.2f} s"
        )


# -- helpers ---------------------------------------------------------------------------------


class MinioServer(ServerProcess):
    """A private MinIO on ``root``: the chaos harness and the demo restart and crash it on purpose (the
    shared service is never restarted). It keeps its port, data and credentials across restarts, so a
    fault proxy in front of it keeps working; it is stopped by its own PID."""

    what = "private MinIO"

    def __init__(self, root: Path, start_timeout_s: float = 120.0) -> None:
        self.root = root
        self.start_timeout_s = start_timeout_s
        self.proc: Proc | None = None
        self._keys = _credentials()
        self._use_ports(free_ports(2))
        self._started = False
        """Whether a start succeeded: from then on the ports are kept."""

    def __repr__(self) -> str:
        return f"MinioServer({self.endpoint.endpoint_url}, root={str(self.root)!r})"

    @property
    def log_path(self) -> Path:
        return self.root / "minio.log"

    def _use_ports(self, ports: Sequence[int]) -> None:
        """Take ``ports`` as (S3 API, console): picked free when made, and moved by a first start that finds one
        taken; kept from then on."""
        self.port, self._console = ports
        self.endpoint = S3Endpoint(f"http://127.0.0.1:{self.port}", *self._keys, "us-east-1")

    def start(self) -> S3Endpoint:
        """Start the server (building MinIO first if needed) and wait until it reports ready.

        The first start moves to fresh ports if one of its own was taken meanwhile; a later one keeps them
        and fails with a :class:`~eosink.services._process.PortClash` naming the port and who took it."""
        service = MinioService()
        service.provisioned()
        certs = self.root / "certs"
        for d in (self.root / "data", certs):
            d.mkdir(parents=True, exist_ok=True)
        env = _server_env(self.endpoint.access_key, self.endpoint.secret_key)

        def start(attempt: Attempt) -> None:
            self._use_ports(attempt.ports)
            argv = _server_argv(service.binary, self.root / "data", self.port, self._console, certs)
            self.proc = proc = spawn(argv, self.log_path, env=env, cwd=self.root)
            try:
                wait_until(
                    _ready(self.endpoint),
                    what="a private MinIO",
                    proc=proc,
                    log_path=self.log_path,
                    timeout_s=self.start_timeout_s,
                    fix=f"read {self.log_path}",
                    attempt=attempt,
                )
            except BaseException:
                self.stop(crash=True)
                raise

        ports = (self.port, self._console)
        start_on_ports(start, ports, log_path=self.log_path, what=self.what, may_move=not self._started)
        self._started = True
        return self.endpoint


def _ready(endpoint: S3Endpoint, ca: str | None = None) -> Callable[[], bool]:
    """Whether MinIO at ``endpoint`` serves signed S3 requests; ``ca``: the CA of its certificate.

    Its health check reports ready before its IAM is loaded, while a signed request still fails with
    XMinioServerNotInitialized; so a signed ListBuckets must succeed too."""
    return functools.partial(_serves, endpoint, ca)


def _serves(endpoint: S3Endpoint, ca: str | None) -> bool:
    if not _http_ok(f"{endpoint.endpoint_url}/minio/health/ready", ca):
        return False
    url = f"{endpoint.endpoint_url}/"
    return _http_ok(signed_request("GET", url, b"", endpoint.access_key, endpoint.secret_key, endpoint.region), ca)


def _credentials() -> tuple[str, str]:
    """A new access key (MinIO: 3..20 characters) and secret key (40 characters, MinIO's maximum)."""
    return "eosink" + secrets.token_hex(6), secrets.token_urlsafe(30)


def _server_env(access_key: str, secret_key: str) -> dict[str, str]:
    """The server's environment: its credentials, and no console, update check or call-home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINIO_")}
    env.update(
        MINIO_ROOT_USER=access_key,
        MINIO_ROOT_PASSWORD=secret_key,
        MINIO_BROWSER="off",
        MINIO_UPDATE="off",
        MINIO_CALLHOME_ENABLE="off",
        MINIO_SITE_REGION="us-east-1",
    )
    return env


def _server_argv(
    binary: Path, data: Path | Sequence[str], port: int, console: int, certs: Path
) -> list[str | os.PathLike[str]]:
    """``minio server`` on ``data``, loopback only, with an empty certs directory (no TLS).

    ``data`` is one directory, or every drive of a distributed setup as URLs (the same list for every node)."""
    return [
        binary,
        "server",
        *([data] if isinstance(data, Path) else data),
        "--address",
        f"127.0.0.1:{port}",
        "--console-address",
        f"127.0.0.1:{console}",
        "--certs-dir",
        certs,
        "--anonymous",
    ]


def _go_env() -> dict[str, str]:
    """The go command's environment: caches in ``<cache>/go``, no cgo, no workspace, no telemetry."""
    root = cache_root() / "go"
    env = dict(os.environ)
    env.update(
        GOPATH=str(root),
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "build"),
        GOFLAGS="-mod=readonly -modcacherw -buildvcs=false",  # -modcacherw: the cache can be deleted
        GONOSUMDB=MINIO_MODULE,  # the pinned MINIO_SUM stands in for the checksum database
        GOTOOLCHAIN="local",
        GOWORK="off",
        GO111MODULE="on",
        GOTELEMETRY="off",
        CGO_ENABLED="0",
    )
    env.setdefault("GOPROXY", "https://proxy.golang.org,direct")
    return env


def _download_module(go: str, env: dict[str, str]) -> tuple[Path, str]:
    """Fetch the pinned MinIO module, verify its hash; its directory and the Go version its go.mod needs."""
    cmd = [go, "mod", "download", "-json", f"{MINIO_MODULE}@{MINIO_VERSION}"]
    done = subprocess.run(cmd, cwd=cache_root(), env=env, capture_output=True, text=True, check=False)
    try:
        info = json.loads(done.stdout)
    except ValueError:
        info = {"Error": _tail(done.stdout + done.stderr)}
    if done.returncode != 0 or info.get("Error"):
        raise ServiceError(
            f"Could not download {MINIO_MODULE}@{MINIO_VERSION}: {info.get('Error')}",
            "check that the Go module proxy (GOPROXY, default proxy.golang.org) is reachable.",
        )
    if info.get("Sum") != MINIO_SUM:
        raise ServiceError(
            f"{MINIO_MODULE}@{MINIO_VERSION} has checksum {info.get('Sum')}, not the pinned {MINIO_SUM}; "
            "nothing was built.",
            f"the module proxy or the module cache is not trustworthy: clear {env['GOMODCACHE']} "
            f"(GOMODCACHE={env['GOMODCACHE']} go clean -modcache) and check GOPROXY.",
        )
    match = re.search(r"^go\s+(\S+)", Path(info["GoMod"]).read_text(), re.MULTILINE)
    return Path(info["Dir"]), match.group(1) if match else "1.0"


def _go_version(go: str, env: dict[str, str]) -> str:
    """The local toolchain's version, e.g. ``1.26.8``."""
    done = subprocess.run([go, "env", "GOVERSION"], env=env, capture_output=True, text=True, check=False)
    return done.stdout.strip().removeprefix("go") or "0"


def _version_tuple(version: str) -> tuple[int, ...]:
    """``1.24.0`` -> (1, 24, 0); pre-release suffixes (``1.25rc1``) count as their base version."""
    return tuple(int(m) for m in re.findall(r"\d+", version.split("rc")[0].split("beta")[0])[:3])


def _http_ok(url: str | urllib.request.Request, ca: str | None = None) -> bool:
    context = ssl.create_default_context(cafile=ca) if ca else None
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _status(err: Any) -> int | None:
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _redact(text: str, endpoint: S3Endpoint) -> str:
    return scrub(text, (endpoint.secret_key, endpoint.access_key))


def _cleanup(client: Any, bucket: str, key: str | None, bucket_exists: bool) -> None:
    """Best effort after a failed check: remove what it created."""
    try:
        if key is not None:
            client.delete_object(Bucket=bucket, Key=key)
        if bucket_exists:
            client.delete_bucket(Bucket=bucket)
    except Exception as err:  # the check's own error matters more
        log.debug("[minio] cleanup of %s failed: %s", bucket, type(err).__name__)


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.splitlines()[-lines:])
