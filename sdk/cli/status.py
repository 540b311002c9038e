"""``eosink status --sink NAME ...``: per app_id, the writer epoch, the last committed batch, what is in doubt.

Read-only. Exit status: 0 nothing in doubt, 1 in-doubt work remains or an error, 2 usage.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from eosink.admin import AppStatus, InDoubtWork, SinkAdmin, SinkStatus
from eosink.cli._common import EXIT_FAIL, EXIT_OK, age, command, opt, table

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
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _status(args: argparse.Namespace, admin: SinkAdmin) -> int:
    status = admin.status(args.app_id)
    if args.json:
        print(json.dumps({"server": admin.describe(), **status.to_json()}, indent=2))
    else:
        print(render(status))
    return EXIT_FAIL if status.in_doubt else EXIT_OK


def render(status: SinkStatus) -> str:
    """The status as tables: the app_ids, then each one's in-doubt work, then orphans."""
    out = [status.where]
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
