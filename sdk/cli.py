"""The ``eosink`` command line.

``demo``, ``services`` and ``new-connector`` hand their arguments to their own modules.
``status`` and ``recover`` are the operator's view of a sink (PostgreSQL for now): what each
app_id committed last and what is in doubt; and the resolution of in-doubt work with the
rules the driver itself applies at start (:mod:`eosink.recovery`), with a dry run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eosink.checkpoint import SparkCheckpoint
    from eosink.connectors.postgres._status import AppStatus, ControlStatus, PreparedGid
    from eosink.connectors.postgres.config import PostgresConfig
    from eosink.recovery import RecoveryPlan
    from eosink.strategies import Strategy

__all__ = ["main"]

COMMANDS = ("demo", "services", "new-connector", "status", "recover", "chaos", "bench")
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    """``eosink demo [...]`` runs the exactly-once demo; ``eosink services ...`` runs the test servers;
    ``eosink new-connector NAME`` renders a new connector package; ``eosink status`` and
    ``eosink recover`` show and resolve a sink's in-doubt work."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS:  # the command's own parser sees --help
        return _dispatch(argv[0], argv[1:])
    parser = argparse.ArgumentParser(prog="eosink", description="End-to-end exactly-once sinks for Spark.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "command",
        nargs="?",
        choices=COMMANDS,
        help="demo: crash a streaming job, prove the result; services: up|check|down|status|env the test servers; "
        "new-connector NAME: render a new connector package; status: a sink's last batches and in-doubt work; "
        "recover: resolve in-doubt work (fences the app_id); chaos: the end-to-end chaos harness; "
        "bench: eosink against Spark's built-in writers on the same data",
    )
    known, rest = parser.parse_known_args(argv)
    if known.version:
        from eosink import __version__

        print(f"eosink {__version__}")
        return 0
    if known.command is not None:
        return _dispatch(known.command, rest)
    parser.print_help()
    return 2


def _dispatch(command: str, rest: list[str]) -> int:
    if command == "services":
        from eosink.services.cli import main as services_main

        return services_main(rest)
    if command == "new-connector":
        try:
            from eosink.contracts.new_connector import main as new_connector_main
        except ImportError as e:  # eosink.contracts needs pytest and hypothesis
            print(f"eosink new-connector: {e}. Fix: pip install 'eosink[contracts]'", file=sys.stderr)
            return 2
        return new_connector_main(rest)
    if command == "demo":
        from eosink.demo import demo_main

        return demo_main(rest)
    if command == "bench":
        from eosink.bench.cli import main as bench_main

        return bench_main(rest)
    if command == "chaos":
        from eosink.chaos.cli import main as chaos_main

        return chaos_main(rest)
    return _operations(command, rest)


# -- status and recover -----------------------------------------------------------------------------

_FENCE_NOTE = (
    "recover FENCES the app_id: it takes a new writer epoch, so a driver of this app_id that is still "
    "running becomes a zombie and fails at its next commit (restart it from its checkpoint afterwards). "
    "It asks for --yes unless --dry-run."
)
_SECRET_NOTE = (
    "The password need not be on the command line: PGPASSWORD, ~/.pgpass and the other libpq variables "
    "work, or --conninfo-env VAR names an environment variable holding the conninfo. It is never printed."
)


class _Usage(Exception):
    """A usage error found after parsing (exit 2)."""


def _parser(command: str) -> argparse.ArgumentParser:
    if command == "status":
        ap = argparse.ArgumentParser(
            prog="eosink status",
            description="Per app_id: the writer epoch, the last committed batch, and every in-doubt prepared "
            "transaction with its age. Read-only. Exit status: 0 nothing in doubt, 1 in-doubt work remains "
            "or an error, 2 usage.",
            epilog=_SECRET_NOTE,
        )
    else:
        ap = argparse.ArgumentParser(
            prog="eosink recover",
            description="Resolve the in-doubt work of one app_id as its driver would at start: roll forward "
            "what the strategy keeps (2pc: what Spark's commit log holds), abort the rest. Exit status: 0 "
            "done (or dry run), 1 an error or in-doubt work remains, 2 usage.",
            epilog=f"{_FENCE_NOTE} {_SECRET_NOTE}",
        )
    ap.add_argument("--sink", required=True, choices=["postgres"], help="the kind of sink")
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--conninfo", help="libpq URL or keyword string (better without the password)")
    source.add_argument("--conninfo-env", metavar="VAR", help="read the conninfo from environment variable VAR")
    ap.add_argument("--table", required=True, help="the sink's target table, as in PostgresConfig(table=...)")
    ap.add_argument("--control-schema", default="eosink", help="PostgresConfig.control_schema (default: eosink)")
    if command == "status":
        ap.add_argument("--app-id", help="show this app_id only (default: every app_id of the control schema)")
    else:
        ap.add_argument("--checkpoint", required=True, metavar="DIR", help="the query's Spark checkpoint location")
        ap.add_argument("--app-id", required=True, help="the app_id given to eosink.foreach_batch")
        ap.add_argument(
            "--strategy",
            choices=["2pc", "txid-check", "idempotent"],
            help="default: the strategy recorded in the checkpoint's eosink manifests (or the last bundle)",
        )
        ap.add_argument("--dry-run", action="store_true", help="print what recover would do; change nothing")
        ap.add_argument("--yes", action="store_true", help="confirm fencing the app_id and resolving its work")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return ap


def _operations(command: str, argv: list[str]) -> int:
    ap = _parser(command)
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    from eosink.errors import EosinkError

    scrub: Callable[[str], str] = str
    try:
        config = _config(args)
        scrub = config.scrub
        if command == "status":
            return _status(config, args)
        return _recover(config, args)
    except _Usage as exc:
        print(f"eosink {command}: {scrub(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except EosinkError as exc:
        text = exc.problem if exc.fix is None else f"{exc.problem}\nFix: {exc.fix}"
        print(f"eosink {command}: error: {scrub(text)}", file=sys.stderr)
        return EXIT_FAIL


def _config(args: argparse.Namespace) -> PostgresConfig:
    from eosink.connectors.postgres.config import PostgresConfig

    if args.conninfo_env is not None:
        conninfo = os.environ.get(args.conninfo_env)
        if not conninfo:
            raise _Usage(f"environment variable {args.conninfo_env!r} (--conninfo-env) is not set or empty")
    else:
        conninfo = args.conninfo
    return PostgresConfig(conninfo, args.table, control_schema=args.control_schema)


# -- status --------------------------------------------------------------------------------------------


def _status(config: PostgresConfig, args: argparse.Namespace) -> int:
    from eosink.connectors.postgres._status import read_status
    from eosink.errors import ConfigurationError

    status = read_status(config, args.app_id)
    if not status.exists and args.app_id is not None:
        raise ConfigurationError(
            f"The control schema {status.control_schema!r} does not exist in database {status.database!r}.",
            "Pass --control-schema as configured in PostgresConfig(control_schema=...).",
        )
    if args.json:
        print(json.dumps({"server": config.redacted_conninfo(), **status.to_json()}, indent=2))
    else:
        print(_render_status(status))
    return EXIT_FAIL if status.in_doubt else EXIT_OK


def _render_status(status: ControlStatus) -> str:
    out = [f"control schema {status.control_schema!r}, database {status.database!r}"]
    if not status.exists:
        out.append("the control schema does not exist: no eosink writer has used it")
    elif not status.apps:
        out.append("no app_id has written through this control schema")
    else:
        out += [
            "",
            _table(
                ["APP_ID", "EPOCH", "LAST BATCH", "ROWS", "COMMITTED", "STRATEGY", "IN DOUBT"],
                [_app_row(a, status.now) for a in status.apps],
            ),
        ]
    for app in status.apps:
        if app.in_doubt:
            out += ["", f"in doubt for {app.app_id!r}:", _in_doubt_table(app)]
    if status.orphans:
        out += ["", "prepared transactions of this control schema of an unknown app_id or another database:"]
        out.append(_table(*_prepared_rows(status.orphans)))
    out.append("")
    if status.in_doubt:
        out.append(
            f"{status.in_doubt} committable(s) in doubt. A running query resolves its own at its next start; "
            "otherwise: eosink recover --app-id APP --checkpoint DIR --dry-run"
        )
    else:
        out.append("nothing in doubt")
    return "\n".join(out)


def _app_row(app: AppStatus, now: dt.datetime) -> list[str]:
    committed = "-" if app.last_committed_at is None else f"{_age((now - app.last_committed_at).total_seconds())} ago"
    return [
        app.app_id,
        str(app.epoch),
        "-" if app.last_batch_id is None else str(app.last_batch_id),
        "-" if app.last_rows is None else str(app.last_rows),
        committed,
        app.last_strategy or "-",
        str(app.in_doubt),
    ]


def _in_doubt_table(app: AppStatus) -> str:
    headers = ["KIND", "BATCH", "PARTICIPANT", "EPOCH", "AGE", "ROWS", "OWNER", "DATABASE", "ID"]
    rows = [
        [
            "prepared",
            _opt(p.batch_id),
            _opt(p.participant),
            _opt(p.epoch),
            _age(p.age_s),
            "?",
            p.owner,
            p.database,
            p.gid,
        ]
        for p in app.prepared
    ]
    rows += [
        ["staged", str(s.batch_id), str(s.participant), str(s.epoch), _age(s.age_s), str(s.rows), "-", "-", s.id]
        for s in app.staged
    ]
    return _table(headers, rows)


def _prepared_rows(gids: Sequence[PreparedGid]) -> tuple[list[str], list[list[str]]]:
    headers = ["BATCH", "PARTICIPANT", "EPOCH", "AGE", "OWNER", "DATABASE", "GID"]
    return headers, [
        [_opt(p.batch_id), _opt(p.participant), _opt(p.epoch), _age(p.age_s), p.owner, p.database, p.gid] for p in gids
    ]


# -- recover ----------------------------------------------------------------------------------------------


def _recover(config: PostgresConfig, args: argparse.Namespace) -> int:
    from eosink.checkpoint import SparkCheckpoint
    from eosink.connectors.postgres import PostgresSink
    from eosink.connectors.postgres._status import read_status
    from eosink.coordinator import Coordinator
    from eosink.errors import ConfigurationError
    from eosink.recovery import plan_recovery

    checkpoint = SparkCheckpoint(args.checkpoint)
    if not checkpoint.exists():
        raise ConfigurationError(
            f"{args.checkpoint!r} is not a Spark checkpoint (no metadata, no commits/).",
            "Pass the query's checkpointLocation, the same as foreach_batch(checkpoint_location=...).",
        )
    app_id: str = args.app_id
    before = read_status(config, app_id)  # also: the control schema and the app_id exist, read-only
    if not before.exists:
        raise ConfigurationError(
            f"The control schema {config.control_schema!r} does not exist in database {before.database!r}.",
            "Pass --control-schema as configured in PostgresConfig(control_schema=...).",
        )
    app = before.apps[0]
    strategy = _strategy(checkpoint, app_id, args.strategy, app.last_strategy)
    sink = PostgresSink(config)
    strategy.check(sink.capabilities, "PostgresSink")
    coordinator = Coordinator(sink, app_id, strategy, checkpoint)
    try:
        if args.dry_run or not args.yes:
            coordinator._checkpoint_id = checkpoint.query_id()  # the check start() makes before fencing
            coordinator._check_checkpoint(sink.fetch_last_bundle(app_id))
            plan = plan_recovery(sink, app_id, strategy, checkpoint)
            if args.json:
                print(json.dumps({"dry_run": True, "epoch": app.epoch, "plan": plan.to_json()}, indent=2))
            else:
                print(_render_plan(plan, app.epoch, app.in_doubt, dry_run=True))
            if args.dry_run:
                return EXIT_OK
            print(f"\nNothing was done. {_FENCE_NOTE} Run again with --yes to do it.", file=sys.stderr)
            return EXIT_USAGE
        coordinator.start()
        executed = coordinator.last_recovery
        assert executed is not None, "start() recovers"
        stats = coordinator.stats
        epoch = coordinator.epoch
    finally:
        coordinator.close()
    after = read_status(config, app_id).apps[0]
    if args.json:
        doc = {"dry_run": False, "epoch": epoch, "plan": executed.to_json(), "stats": stats.to_json()}
        print(json.dumps({**doc, "in_doubt_after": after.in_doubt}, indent=2))
    else:
        print(_render_plan(executed, app.epoch, app.in_doubt, dry_run=False, new_epoch=epoch))
        print(
            f"\ndone: {stats.recovered_forward} batch(es) rolled forward, {stats.recovered_aborted} aborted, "
            f"{stats.orphans_aborted} committable(s) aborted; {after.in_doubt} in doubt now"
        )
    return EXIT_FAIL if after.in_doubt else EXIT_OK


def _strategy(checkpoint: SparkCheckpoint, app_id: str, given: str | None, last: str | None) -> Strategy:
    """The strategy the app_id runs with: its manifests say it; else its last bundle; else --strategy."""
    from eosink.errors import ConfigurationError
    from eosink.strategies import resolve_strategy

    names: set[str] = set()
    for batch_id in checkpoint.manifest_batches(app_id):
        manifest = checkpoint.read_manifest(app_id, batch_id)
        if manifest is not None and manifest.get("bundle", {}).get("strategy"):
            names.add(str(manifest["bundle"]["strategy"]))
    recorded = sorted(names) or ([last] if last else [])
    if len(recorded) > 1:
        raise ConfigurationError(
            f"The manifests of app_id {app_id!r} name several strategies: {', '.join(recorded)}.",
            "Restore the checkpoint of this query; manifests of one query share one strategy.",
        )
    if given and recorded and recorded[0] != given:
        raise ConfigurationError(
            f"--strategy {given} contradicts the strategy {recorded[0]!r} app_id {app_id!r} writes with.",
            f"Drop --strategy (the recorded {recorded[0]!r} is used) or check --app-id and --checkpoint.",
        )
    name = given or (recorded[0] if recorded else None)
    if name is None:
        raise ConfigurationError(
            f"Cannot tell the strategy of app_id {app_id!r}: no manifest in the checkpoint names one and no "
            "batch was committed yet.",
            "Pass --strategy as given to eosink.foreach_batch (2pc, txid-check or idempotent).",
        )
    try:
        return resolve_strategy(name)
    except ConfigurationError:
        raise ConfigurationError(
            f"The strategy {name!r} recorded for app_id {app_id!r} is unknown to this eosink.",
            "Upgrade eosink to the version the query runs with, or pass --strategy.",
        ) from None


def _render_plan(plan: RecoveryPlan, epoch: int, in_doubt: int, *, dry_run: bool, new_epoch: int | None = None) -> str:
    verb = "would" if dry_run else "did"
    head = f"app_id {plan.app_id!r}, strategy {plan.strategy}, last committed batch {_opt(plan.last_batch_id)}, "
    head += f"{in_doubt} committable(s) in doubt"
    out = [head]
    if dry_run:
        out.append(
            f"dry run: nothing changed. recover would fence app_id {plan.app_id!r} (epoch {epoch} -> "
            f"{epoch + 1}): a driver still running with it becomes a zombie and stops."
        )
    else:
        out.append(
            f"fenced app_id {plan.app_id!r}: epoch {epoch} -> {new_epoch}; an older driver still running "
            "is a zombie now and stops at its next commit."
        )
    if plan.empty:
        out.append(f"recovery {verb} nothing: no in-doubt batch and no manifest left")
        return "\n".join(out)
    rows = [
        [
            str(b.batch_id),
            b.action.value,
            _opt(b.spark_committed),
            str(len(b.commit)),
            str(len(b.abort)),
            str(b.rows),
            b.reason,
        ]
        for b in plan.batches
    ]
    out += [
        "",
        f"recovery {verb}:",
        _table(["BATCH", "ACTION", "SPARK COMMITTED", "COMMIT", "ABORT", "ROWS", "WHY"], rows),
    ]
    return "\n".join(out)


# -- formatting -----------------------------------------------------------------------------------------


def _opt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _age(seconds: float) -> str:
    """``42s``, ``5m 07s``, ``3h 02m``, ``2d 04h``: an age a person reads at a glance."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
