"""``eosink status --sink NAME ...``: per app_id, the writer epoch, the last committed batch, what is in doubt.

With ``--checkpoint DIR --app-id A`` it also judges the app_id against its Spark checkpoint, as
recovery at start would: a batch Spark's commit log holds whose work the sink no longer has is
shown as **lost** (:class:`~eosink.errors.PreparedWorkLostError`), with the rewind that brings it
back. Read-only. Exit status: 0 nothing in doubt and nothing lost, 1 in-doubt work remains, a
batch is lost, or an error, 2 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from eosink.admin import AppStatus, InDoubtWork, SinkAdmin, SinkStatus
from eosink.checkpoint import SparkCheckpoint
from eosink.cli._common import EXIT_FAIL, EXIT_OK, Usage, age, command, opt, table
from eosink.errors import ConfigurationError
from eosink.recovery import BatchPlan, recorded_strategy
from eosink.strategies import TwoPhaseCommit

__all__ = ["main", "render"]


def main(argv: Sequence[str]) -> int:
    return command(
        "status",
        "Per app_id: the writer epoch, the last committed batch, and every piece of in-doubt work with its age. "
        "Read-only. Exit status: 0 nothing in doubt, 1 in-doubt work remains or an error, 2 usage.",
        "",
        argv,
        _options,
        _status,
    )


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--app-id", help="show this app_id only (default: every app_id the sink knows)")
    ap.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="the app_id's Spark checkpoint (with --app-id): also show batches Spark committed that the sink lost",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _status(args: argparse.Namespace, admin: SinkAdmin) -> int:
    if args.checkpoint is not None and args.app_id is None:
        raise Usage("--checkpoint needs --app-id: a checkpoint belongs to one app_id")
    status = admin.status(args.app_id)
    lost = () if args.checkpoint is None else _lost(args, admin, status)
    if args.json:
        doc = {"server": admin.describe(), **status.to_json()}
        if args.checkpoint is not None:
            doc["lost"] = [b.to_json() for b in lost]
        print(json.dumps(doc, indent=2))
    else:
        print(render(status))
        for b in lost:
            print(
                f"\nLOST: batch {b.batch_id} of app_id {args.app_id!r}: Spark's commit log holds it, but the sink no "
                f"longer has its work ({b.reason}). Rewind: eosink recover --rewind --sink {args.sink} ... "
                f"--checkpoint {args.checkpoint} --app-id {args.app_id} (a dry run; then --yes)"
            )
    return EXIT_FAIL if status.in_doubt or lost else EXIT_OK


def _lost(args: argparse.Namespace, admin: SinkAdmin, status: SinkStatus) -> tuple[BatchPlan, ...]:
    """The batches recovery at start would stop on as lost (read-only)."""
    from eosink.coordinator import Coordinator

    checkpoint = SparkCheckpoint(args.checkpoint)
    app = status.app(args.app_id)
    try:
        strategy = recorded_strategy(checkpoint, args.app_id, None, None if app is None else app.last_strategy)
    except ConfigurationError:  # nothing recorded yet: which batches are lost does not depend on it
        strategy = TwoPhaseCommit()
    sink = admin.make_sink()
    try:
        return Coordinator(sink, args.app_id, strategy, checkpoint).recovery_plan().lost
    finally:
        sink.close()


def render(status: SinkStatus) -> str:
    """The status as tables: the app_ids, then each one's in-doubt work, then orphans."""
    out = [status.where, *status.notes]
    if not status.exists:
        out.append("nothing exists there yet: no eosink writer has used it")
    elif not status.apps:
        out.append("no app_id has written there")
    else:
        out += [
            "",
            table(
                ["APP_ID", "EPOCH", "LAST BATCH", "ROWS", "COMMITTED", "STRATEGY", "IN DOUBT"],
                [_app_row(a) for a in status.apps],
            ),
        ]
    for app in status.apps:
        if app.in_doubt:
            out += ["", f"in doubt for {app.app_id!r}:", in_doubt_table(app.in_doubt)]
    if status.orphans:
        out += ["", "in-doubt work here of an unknown app_id (or another database):", in_doubt_table(status.orphans)]
    out.append("")
    if status.in_doubt:
        out.append(
            f"{status.in_doubt} piece(s) of work in doubt. A running query resolves its own at its next start; "
            "otherwise: eosink recover --app-id APP --checkpoint DIR --dry-run"
        )
    else:
        out.append("nothing in doubt")
    return "\n".join(out)


def _app_row(app: AppStatus) -> list[str]:
    committed = "-" if app.last_committed_age_s is None else f"{age(app.last_committed_age_s)} ago"
    return [
        app.app_id,
        opt(app.epoch),
        opt(app.last_batch_id),
        opt(app.last_rows),
        committed,
        app.last_strategy or "-",
        str(len(app.in_doubt)),
    ]


def in_doubt_table(work: Sequence[InDoubtWork]) -> str:
    """One row per piece of work, oldest first: what it is, its batch, age, expiry and the sink's details."""
    details = sorted({k for w in work for k in w.details})
    expiring = any(w.expires_in_s is not None for w in work)
    headers = ["KIND", "BATCH", "PARTICIPANT", "EPOCH", "AGE", "ROWS"]
    headers += ["EXPIRES IN"] * expiring + [k.upper() for k in details] + ["ID"]
    rows = []
    for w in sorted(work, key=lambda w: -w.age_s):
        row = [w.kind, opt(w.batch_id), opt(w.participant), opt(w.epoch), age(w.age_s), opt(w.rows)]
        if expiring:
            row.append("-" if w.expires_in_s is None else age(w.expires_in_s))
        rows.append(row + [str(w.details.get(k, "-")) for k in details] + [w.id])
    return table(headers, rows)
