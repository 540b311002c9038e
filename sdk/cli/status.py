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
from eosink.cli._fanout import Member, fanned_out, run_fanout
from eosink.errors import ConfigurationError
from eosink.fanout import check_order
from eosink.recovery import BatchPlan, recorded_strategy
from eosink.strategies import TwoPhaseCommit

__all__ = ["main", "render", "render_fanout"]


DESCRIPTION = (
    "Per app_id: the writer epoch, the last committed batch, and every piece of in-doubt work with its age. "
    "A fan-out's sinks side by side: --sink more than once (NAME=KIND each), with --app-id. "
    "Read-only. Exit status: 0 nothing in doubt, 1 in-doubt work remains or an error, 2 usage."
)


def main(argv: Sequence[str]) -> int:
    if fanned_out(argv):
        return run_fanout("status", DESCRIPTION, argv, _options, _fanout_status)
    return command("status", DESCRIPTION, "", argv, _options, _status)


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
    lost = () if args.checkpoint is None else _lost(args.checkpoint, args.app_id, admin, status)
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


def _lost(location: str, app_id: str, admin: SinkAdmin, status: SinkStatus) -> tuple[BatchPlan, ...]:
    """The batches recovery at start would stop on as lost (read-only)."""
    from eosink.coordinator import Coordinator

    checkpoint = SparkCheckpoint(location)
    app = status.app(app_id)
    try:
        strategy = recorded_strategy(checkpoint, app_id, None, None if app is None else app.last_strategy)
    except ConfigurationError:  # nothing recorded yet: which batches are lost does not depend on it
        strategy = TwoPhaseCommit()
    sink = admin.make_sink()
    try:
        return Coordinator(sink, app_id, strategy, checkpoint).recovery_plan().lost
    finally:
        sink.close()


def _fanout_status(args: argparse.Namespace, members: list[Member]) -> int:
    """Each sink of the fan-out ``args.app_id``, in commit order: one table, then what is in doubt, behind or lost."""
    if args.checkpoint is not None:
        check_order(SparkCheckpoint(args.checkpoint), args.app_id, [m.name for m in members], record=False)
    views = []
    for m in members:
        app_id = m.app_id(args.app_id)
        status = m.admin.status(app_id)
        lost = () if args.checkpoint is None else _lost(args.checkpoint, app_id, m.admin, status)
        views.append((m, app_id, status, lost))
    if args.json:
        sinks = [
            {
                "name": m.name,
                "kind": m.kind,
                "server": m.admin.describe(),
                **st.to_json(),
                "lost": [b.to_json() for b in lost],
            }
            for m, _, st, lost in views
        ]
        print(json.dumps({"app_id": args.app_id, "sinks": sinks}, indent=2))
    else:
        print(render_fanout(args.app_id, [(m.name, m.kind, app_id, st) for m, app_id, st, _ in views]))
        for m, app_id, _, lost in views:
            for b in lost:
                print(
                    f"\nLOST in sink {m.name!r}: batch {b.batch_id} of app_id {app_id!r}: Spark's commit log holds "
                    f"it, but the sink no longer has its work ({b.reason}). The other sinks stay as they are. "
                    f"Rewind: eosink recover --rewind --sink {m.kind} ... --checkpoint {args.checkpoint} "
                    f"--app-id {app_id} (a dry run; then --yes)"
                )
    doubtful = any(st.in_doubt for _, _, st, _ in views) or any(lost for *_, lost in views)
    return EXIT_FAIL if doubtful else EXIT_OK


def render_fanout(app_id: str, sinks: Sequence[tuple[str, str, str, SinkStatus]]) -> str:
    """A fan-out's sinks side by side: (name, kind, member app_id, status) each, in commit order."""
    out = [f"fan-out {app_id!r}: {len(sinks)} sinks, committed in this order"]
    out += [f"  {name} ({kind}): {st.where}" for name, kind, _, st in sinks]
    rows, held = [], []
    for name, kind, member, st in sinks:
        app = st.app(member)
        rows.append([name, kind, *(_app_row(app) if app is not None else [member, *"-" * 5, "0"])])
        held.append((name, None if app is None else app.last_batch_id))
    out += [
        "",
        table(["SINK", "KIND", "APP_ID", "EPOCH", "LAST BATCH", "ROWS", "COMMITTED", "STRATEGY", "IN DOUBT"], rows),
    ]
    for name, _, member, st in sinks:
        app = st.app(member)
        if app is not None and app.in_doubt:
            out += ["", f"in doubt in sink {name!r} ({member!r}):", in_doubt_table(app.in_doubt)]
    newest = [b for _, b in held if b is not None]
    behind = [(n, b) for n, b in held if newest and (b is None or b < max(newest))]
    out.append("")
    if behind:
        lag = ", ".join(f"{n} ({'no batch' if b is None else f'up to batch {b}'})" for n, b in behind)
        out.append(
            f"behind the newest batch {max(newest)}: {lag}. The query's next start commits what Spark committed "
            "there (2pc), or Spark replays the rest; eosink recover --dry-run with the same sinks shows the plan."
        )
    else:
        out.append("every sink holds the same batches" if newest else "no sink holds a batch of this app yet")
    total = sum(st.in_doubt for *_, st in sinks)
    out.append(f"{total} piece(s) of work in doubt" if total else "nothing in doubt")
    return "\n".join(out)


def render(status: SinkStatus) -> str:
    """The status as tables: the app_ids, then each one's in-doubt work, then orphans."""
    out = [status.where, *status.notes]
    if status.servers:
        rows = [[s.address, s.role, s.identity or "-", s.state or "-"] for s in status.servers]
        out += ["", table(["SERVER", "ROLE", "IDENTITY", "STATE"], rows), ""]
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
