"""``eosink services up|provision|check|down|status|env [NAME ...]``: the harness from the command line.

Names are the servers (postgres, kafka, hdfs, minio), their secured variants (``postgres-secure``,
...: TLS, authentication and a least-privileged writer) and ``spark-jars`` (provision and check
only); none means the plain servers and the jars. ``--secure`` picks the secured variant of each
named server (of every server with a variant, when none is named). ``up`` provisions in two
lanes at once — MinIO's Go build beside the Maven downloads — then starts the servers one by
one. ``provision`` does the first half alone (``make test`` runs it in the background while its first,
single-process stages run, so that a cold machine builds MinIO on its otherwise idle second core); a
later ``up`` waits for a build in progress instead of starting another. Exit status 1 means something
failed; the message says what to do.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eosink.errors import ServiceError
from eosink.services._registry import PLAIN_SERVICE_NAMES, SECURE_VARIANTS, SERVICE_NAMES, get_service
from eosink.services._users import purge_fallback_root
from eosink.services.base import Service
from eosink.services.spark_jars import SparkJars

__all__ = ["main", "selected"]

log = logging.getLogger("eosink.services")
JARS = "spark-jars"
ALL = (*SERVICE_NAMES, JARS)
DEFAULT = (*PLAIN_SERVICE_NAMES, JARS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one harness command; returns the exit status."""
    parser = argparse.ArgumentParser(prog="eosink services", description="Real servers for tests, without Docker.")
    parser.add_argument("action", choices=["up", "provision", "check", "down", "status", "env"])
    default = " ".join(DEFAULT)
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"any of {', '.join(ALL)} (default: {default})")
    parser.add_argument("--secure", action="store_true", help="the secured variant of each named server")
    args = parser.parse_intermixed_args(argv)
    _log_progress()
    unknown = [n for n in args.names if n not in ALL]
    if unknown:
        parser.error(f"unknown service {', '.join(unknown)}; choose from {', '.join(ALL)}")
    names = selected(args.names, secure=args.secure)
    actions: dict[str, Callable[[list[str]], int]] = {
        "up": up,
        "provision": provision,
        "check": check,
        "down": down,
        "status": status,
        "env": env,
    }
    action = actions[args.action]
    try:
        return action(names)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def selected(names: Sequence[str], *, secure: bool) -> list[str]:
    """The services a command acts on, in start order: ``names`` (none: every plain server and the jars), or
    with ``secure`` the secured variant of each (none: every server's)."""
    chosen: list[str] = [n for n in ALL if n in names] if names else list(DEFAULT)
    if not secure:
        return chosen
    plain = chosen if names else list(SECURE_VARIANTS)
    return [SECURE_VARIANTS.get(n, n) for n in plain if n in SECURE_VARIANTS or n in SECURE_VARIANTS.values()]


def _log_progress() -> None:
    """The harness's progress on stderr; the clients' own chatter (kafka-python, boto) stays quiet."""
    logger = logging.getLogger("eosink")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _servers(names: list[str]) -> list[Service[Any]]:
    return [get_service(n) for n in names if n != JARS]


def up(names: list[str]) -> int:
    """Provision (two lanes in parallel), then start every named server."""
    started = time.monotonic()
    servers = _servers(names)
    _provision_lanes(names, [s for s in servers if s.external() is None and s.pid() is None])
    for server in servers:
        server.up()
    log.info("services up in %.0f s", time.monotonic() - started)
    status(names)
    return 0


def provision(names: list[str]) -> int:
    """Download and build what every named server needs (two lanes in parallel), without starting any."""
    started = time.monotonic()
    _provision_lanes(names, [s for s in _servers(names) if s.external() is None])
    log.info("services provisioned in %.0f s", time.monotonic() - started)
    return 0


def _provision_lanes(names: list[str], servers: list[Service[Any]]) -> None:
    """MinIO's Go build in one lane, the Maven downloads in the other. Each step holds its cache lock, so a
    provisioning already under way in another process is waited for, not repeated."""
    go_lane = [s.provisioned for s in servers if s.name.startswith("minio")]
    maven_lane = ([SparkJars().provision] if JARS in names else []) + [
        s.provisioned for s in servers if not s.name.startswith("minio")
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        lanes = [pool.submit(_run_all, lane) for lane in (maven_lane, go_lane)]
        for lane in lanes:
            lane.result()


def _run_all(steps: list[Callable[[], None]]) -> None:
    for step in steps:
        step()


def check(names: list[str]) -> int:
    """Exercise every named service with the client its connector uses."""
    failed = 0
    for name in names:
        try:
            if name == JARS:
                summary = SparkJars().check()
            else:
                server = get_service(name)
                summary = server.check(server.endpoint())
            print(f"ok    {summary}")
        except ServiceError as exc:
            failed += 1
            print(f"FAIL  {name}: {exc}")
    if failed:
        print(f"{failed} of {len(names)} service checks failed", file=sys.stderr)
    return 1 if failed else 0


def down(names: list[str]) -> int:
    """Stop every named local server (your own servers are left alone); once none runs, remove what the
    harness made outside its cache (the service user's copies and data under the system's temp folder)."""
    for server in _servers(names):
        if not server.down():
            log.info("[%s] not running", server.name)
    if all(get_service(n).pid() is None for n in SERVICE_NAMES):
        removed = purge_fallback_root()
        if removed is not None:
            log.info("removed %s (the service user's copies and data)", removed)
    return 0


def status(names: list[str]) -> int:
    """One line per service: where it is and where its log is."""
    for server in _servers(names):
        if server.external() is not None:
            where = f"your server ({', '.join(server.override_vars)}): {server.external()!r}"
        elif (pid := server.pid()) is not None:
            where = f"running, pid {pid}: {server.endpoint()!r}; log {server.log_path}"
        else:
            where = "stopped"
        print(f"{server.name:<15} {where}")
    return 0


def env(names: list[str]) -> int:
    """``export`` lines for every running service's endpoint (includes generated credentials)."""
    for server in _servers(names):
        try:
            endpoint = server.endpoint()
        except ServiceError as exc:
            print(f"# {server.name}: {exc.problem}")
            continue
        for key, value in endpoint.env().items():
            print(f"export {key}={shlex.quote(value)}")
    return 0
