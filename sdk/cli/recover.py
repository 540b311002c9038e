"""``eosink recover --sink NAME ... --app-id A --checkpoint DIR``: resolve in-doubt work as the driver would at start.

It rolls forward what the strategy keeps (2pc: what Spark's commit log holds) and aborts the rest,
with the rules of :mod:`eosink.recovery`; ``--dry-run`` prints the plan and changes nothing.
``--rewind`` instead rewinds the checkpoint to a batch whose work the sink lost
(:mod:`eosink.rewind`): a dry run unless ``--yes``. Exit status: 0 done (or dry run), 1 an error
or in-doubt work remains, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from eosink.admin import AppStatus, SinkAdmin
from eosink.checkpoint import SparkCheckpoint
from eosink.cli._common import EXIT_FAIL, EXIT_OK, EXIT_USAGE, command, opt, table
from eosink.cli._fanout import Member, fanned_out, run_fanout
from eosink.coordinator import Coordinator
from eosink.errors import ConfigurationError
from eosink.fanout import FanOut, check_order
from eosink.recovery import RecoveryPlan, recorded_strategy
from eosink.rewind import lease_holder, plan_rewind, rewind
from eosink.strategies import STRATEGY_NAMES

__all__ = ["FENCE_NOTE", "main", "render_plan"]

FENCE_NOTE = (
    "recover FENCES the app_id: it takes a new writer epoch, so a driver of this app_id that is still "
    "running becomes a zombie and fails at its next commit (restart it from its checkpoint afterwards). "
    "It asks for --yes unless --dry-run."
)


DESCRIPTION = (
    "Resolve the in-doubt work of one app_id as its driver would at start: roll forward what the strategy "
    "keeps (2pc: what Spark's commit log holds), abort the rest. A fan-out's sinks in their commit order: "
    "--sink more than once (NAME=KIND each), with --app-id. Exit status: 0 done (or dry run), 1 an error or "
    "in-doubt work remains, 2 usage."
)


def main(argv: Sequence[str]) -> int:
    if fanned_out(argv) and "--rewind" in argv:
        print(
            "eosink recover: --rewind takes the one sink that lost work: eosink recover --rewind --sink KIND "
            "<its options> --checkpoint DIR --app-id <app-id>.<name>",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if fanned_out(argv):
        return run_fanout("recover", f"{DESCRIPTION} {FENCE_NOTE}", argv, _options, _recover_fanout)
    return command("recover", DESCRIPTION, FENCE_NOTE, argv, _options, _recover)


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--checkpoint", required=True, metavar="DIR", help="the query's Spark checkpoint location")
    ap.add_argument("--app-id", required=True, help="the app_id given to eosink.foreach_batch")
    ap.add_argument(
        "--strategy",
        choices=STRATEGY_NAMES,
        help="default: the strategy recorded in the checkpoint's eosink manifests (or the last bundle)",
    )
    ap.add_argument("--dry-run", action="store_true", help="print what recover would do; change nothing")
    ap.add_argument(
        "--rewind",
        action="store_true",
        help="rewind the checkpoint to the first batch Spark committed whose work the sink lost "
        "(PreparedWorkLostError), so that the next start runs it again; a dry run unless --yes",
    )
    ap.add_argument("--yes", action="store_true", help="confirm fencing the app_id and resolving its work")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _checkpoint(location: str) -> SparkCheckpoint:
    checkpoint = SparkCheckpoint(location)
    if not checkpoint.exists():
        raise ConfigurationError(
            f"{location!r} is not a Spark checkpoint (no metadata, no commits/).",
            "Pass the query's checkpointLocation, the same as foreach_batch(checkpoint_location=...).",
        )
    return checkpoint


def _before(admin: SinkAdmin, app_id: str) -> AppStatus:
    """The app_id's status before recovery (read-only): also, that the sink exists."""
    before = admin.status(app_id)
    if not before.exists:
        raise ConfigurationError(f"Nothing exists at {before.where}.", "Check the sink's options.")
    return before.apps[0]


def _recover(args: argparse.Namespace, admin: SinkAdmin) -> int:
    checkpoint = _checkpoint(args.checkpoint)
    app_id: str = args.app_id
    app = _before(admin, app_id)
    epoch, in_doubt = app.epoch or 0, len(app.in_doubt)
    strategy = recorded_strategy(checkpoint, app_id, args.strategy, app.last_strategy)
    sink = admin.make_sink()
    strategy.check(sink.capabilities, type(sink).__name__)
    coordinator = Coordinator(sink, app_id, strategy, checkpoint)
    if args.rewind:
        try:
            return _rewind(args, checkpoint, coordinator)
        finally:
            sink.close()
    try:
        if args.dry_run or not args.yes:
            plan = coordinator.recovery_plan()
            if args.json:
                print(json.dumps({"dry_run": True, "epoch": epoch, "plan": plan.to_json()}, indent=2))
            else:
                print(render_plan(plan, epoch, in_doubt, dry_run=True))
            if args.dry_run:
                return EXIT_OK
            print(f"\nNothing was done. {FENCE_NOTE} Run again with --yes to do it.", file=sys.stderr)
            return EXIT_USAGE
        coordinator.start()
        executed = coordinator.last_recovery
        assert executed is not None, "start() recovers"
        stats = coordinator.stats
        new_epoch = coordinator.epoch
    finally:
        coordinator.close()
    after = len(admin.status(app_id).apps[0].in_doubt)
    if args.json:
        doc = {"dry_run": False, "epoch": new_epoch, "plan": executed.to_json(), "stats": stats.to_json()}
        print(json.dumps({**doc, "in_doubt_after": after}, indent=2))
    else:
        print(render_plan(executed, epoch, in_doubt, dry_run=False, new_epoch=new_epoch))
        print(
            f"\ndone: {stats.recovered_forward} batch(es) rolled forward, {stats.recovered_aborted} aborted, "
            f"{stats.orphans_aborted} committable(s) aborted; {after} in doubt now"
        )
    return EXIT_FAIL if after else EXIT_OK


def _recover_fanout(args: argparse.Namespace, members: list[Member]) -> int:
    """Recover a fan-out's sinks in their commit order, as its driver would at start (:meth:`FanOut.start`)."""
    checkpoint = _checkpoint(args.checkpoint)
    check_order(checkpoint, args.app_id, [m.name for m in members], record=False)
    apps = [_before(m.admin, m.app_id(args.app_id)) for m in members]
    unknown = [m.app_id(args.app_id) for m, a in zip(members, apps, strict=True) if a.epoch is None]
    if unknown:
        raise ConfigurationError(
            f"No writer of {', '.join(map(repr, unknown))} ever ran there: nothing to recover.",
            "Check each --sink NAME=KIND against the query's sink names (a sink's app_id is <app-id>.<name>).",
        )
    strategy = recorded_strategy(checkpoint, members[0].app_id(args.app_id), args.strategy, apps[0].last_strategy)
    sinks: list[tuple[str, Any]] = []
    try:
        for m in members:
            sinks.append((m.name, m.admin.make_sink()))
    except BaseException:
        for _, sink in sinks:
            sink.close()
        raise
    fanout = FanOut(sinks, args.app_id, strategy, checkpoint, threaded=False)
    try:
        for name, sink in sinks:
            strategy.check(sink.capabilities, f"{type(sink).__name__} (sink {name!r})")
        if args.dry_run or not args.yes:
            plans = fanout.recovery_plans()
            if args.json:
                doc = [
                    {"sink": n, "epoch": a.epoch or 0, "plan": p.to_json()}
                    for (n, p), a in zip(plans, apps, strict=True)
                ]
                print(json.dumps({"dry_run": True, "app_id": args.app_id, "sinks": doc}, indent=2))
            else:
                for (name, plan), app in zip(plans, apps, strict=True):
                    print(
                        f"sink {name!r}:\n" + render_plan(plan, app.epoch or 0, len(app.in_doubt), dry_run=True) + "\n"
                    )
            if args.dry_run:
                return EXIT_OK
            print(f"Nothing was done. {FENCE_NOTE} Run again with --yes to do it.", file=sys.stderr)
            return EXIT_USAGE
        fanout.start()
        done = [(n, c.last_recovery, c.epoch, c.stats) for n, c in zip(fanout.names, fanout.coordinators, strict=True)]
    finally:
        fanout.close()
    after = [len(_before(m.admin, m.app_id(args.app_id)).in_doubt) for m in members]
    if args.json:
        doc = [
            {"sink": n, "epoch": e, "plan": p.to_json() if p else None, "stats": s.to_json(), "in_doubt_after": a}
            for (n, p, e, s), a in zip(done, after, strict=True)
        ]
        print(json.dumps({"dry_run": False, "app_id": args.app_id, "sinks": doc}, indent=2))
    else:
        for (name, executed, epoch, stats), app, left in zip(done, apps, after, strict=True):
            assert executed is not None, "start() recovers"
            print(
                f"sink {name!r}:\n"
                + render_plan(executed, app.epoch or 0, len(app.in_doubt), dry_run=False, new_epoch=epoch)
            )
            print(
                f"done: {stats.recovered_forward} batch(es) rolled forward, {stats.recovered_aborted} aborted, "
                f"{stats.orphans_aborted} committable(s) aborted; {left} in doubt now\n"
            )
    return EXIT_FAIL if any(after) else EXIT_OK


def _rewind(args: argparse.Namespace, checkpoint: SparkCheckpoint, coordinator: Coordinator) -> int:
    """Plan the rewind (refused when unsafe), print it; with --yes (and not --dry-run) carry it out."""
    last = coordinator.sink.fetch_last_bundle(coordinator.app_id)
    plan = plan_rewind(checkpoint, coordinator.recovery_plan(), None if last is None else last.batch.batch_id)
    act = args.yes and not args.dry_run
    record = rewind(checkpoint, plan) if act else None
    if args.json:
        print(json.dumps({"dry_run": not act, "rewind": plan.to_json(), "record": "/".join(record or ())}, indent=2))
        return EXIT_OK
    verb = "moved" if act else "would move"
    out = [
        f"app_id {plan.app_id!r}: batch {plan.batch_id} is lost ({plan.reason}).",
        f"rewind to batch {plan.batch_id}: {verb} these files into {checkpoint.location}/{'/'.join(plan.backup)}:",
        f"  Spark's commit log: {_ids(plan.commits)} (Spark runs these batches again)",
        f"  Spark's offsets log: {_ids(plan.offsets)} (planned, never committed; planned anew)",
        f"  eosink's manifests: {_ids(plan.manifests)}",
        f"  kept: offsets/{plan.batch_id} and everything before it, and the state: batch {plan.batch_id} runs "
        "again from the same offsets and state",
    ]
    if plan.lease is not None:
        out.append(f"  the stale lease of a dead driver ({lease_holder(plan.lease)}) is removed")
    if act:
        out += [
            "",
            f"done; what was moved and why is in {checkpoint.location}/{'/'.join(record or ())}.",
            f"Start the query again: it runs batch {plan.batch_id} again, and it lands once.",
        ]
    else:
        out += ["", "dry run: nothing changed. Run again with --yes to rewind."]
    print("\n".join(out))
    return EXIT_OK


def _ids(ids: tuple[int, ...]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def render_plan(plan: RecoveryPlan, epoch: int, in_doubt: int, *, dry_run: bool, new_epoch: int | None = None) -> str:
    """The plan as a table, with what fencing does to a driver still running."""
    verb = "would" if dry_run else "did"
    head = f"app_id {plan.app_id!r}, strategy {plan.strategy}, last committed batch {opt(plan.last_batch_id)}, "
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
            opt(b.spark_committed),
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
        table(["BATCH", "ACTION", "SPARK COMMITTED", "COMMIT", "ABORT", "ROWS", "WHY"], rows),
    ]
    return "\n".join(out)
