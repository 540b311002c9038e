"""What batch-atomic visibility costs the PostgreSQL sink: commit_mode "atomic" against "per-participant".

atomic: participants COPY into their own staging tables and PREPARE; the coordinator runs
COMMIT PREPARED per participant, then one transaction moves the staged rows into the target
with the bundle. per-participant: participants also move their rows into the target inside the
prepared transaction (in parallel, on executors); the coordinator's commit is COMMIT PREPARED
per participant plus the bundle. Participants run one after another here (one process), so the
total is the same work; the commit, which runs on the driver, is what differs.

    .venv/bin/python benchmarks/postgres_commit_modes.py [--rows 200000] [--participants 2] [--repeat 3]

Writes ``benchmarks/results/postgres-commit-modes.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.contract import BatchRef, Bundle, Fingerprint, TaskRef
from eosink.services import get_service

RESULTS = Path(__file__).parent / "results" / "postgres-commit-modes.json"


def _data(rows: int, offset: int) -> pa.RecordBatch:
    ids = pa.array(range(offset, offset + rows), pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            ids,
            pa.array([f"customer-{i % 9973}" for i in range(rows)]),
            pa.array([i * 0.25 for i in range(rows)], pa.float64()),
            pa.array([1_700_000_000_000_000 + i for i in range(rows)], pa.timestamp("us", "UTC")),
        ],
        names=["id", "name", "amount", "at"],
    )


def run_once(url: str, rows: int, participants: int, mode: str) -> dict[str, float]:
    """One 2pc batch in ``mode``: the participants' time (stage and prepare) and the coordinator's commit."""
    tag = uuid.uuid4().hex[:8]
    table, ctl, app = f"bench_modes_{tag}", f"bench_modes_{tag}_ctl", "bench"
    config = PostgresConfig(url, table=table, control_schema=ctl, create_table=True, commit_mode=mode)  # type: ignore[arg-type]
    sink = PostgresSink(config)
    try:
        epoch = sink.fence(app)
        batch = BatchRef(app, 0)
        share = rows // participants
        data = [_data(share, p * share) for p in range(participants)]
        started = time.perf_counter()
        committables = []
        for p in range(participants):
            txn = sink.begin(TaskRef(batch, epoch, p, f"a{p}", None, True, "2pc"))
            sink.write(txn, data[p])
            committables.append(sink.pre_commit(txn))
        participants_s = time.perf_counter() - started
        started = time.perf_counter()
        sink.commit(batch, committables, Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables)))
        commit_s = time.perf_counter() - started
        return {"participants_s": participants_s, "commit_s": commit_s, "total_s": participants_s + commit_s}
    finally:
        sink.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(ctl)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--participants", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    url = get_service("postgres").endpoint().url
    modes = ("atomic", "per-participant")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for n in range(args.repeat):
        for mode in modes:  # interleaved, so drift on a shared machine hits both
            runs[mode].append(run_once(url, args.rows, args.participants, mode))
            print(f"run {n + 1}/{args.repeat} {mode}: " + ", ".join(f"{k} {v:.3f}" for k, v in runs[mode][-1].items()))
    median = {m: {k: statistics.median(r[k] for r in runs[m]) for k in runs[m][0]} for m in modes}
    atomic, per = median["atomic"], median["per-participant"]
    result: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "arch": platform.machine(), "cpus": os.cpu_count()},
        "rows": args.rows,
        "participants": args.participants,
        "runs": runs,
        "median": median,
        "rows_per_s": {m: round(args.rows / median[m]["total_s"]) for m in modes},
        "commit_latency_ratio_atomic_over_per_participant": round(atomic["commit_s"] / per["commit_s"], 2),
        "total_ratio_atomic_over_per_participant": round(atomic["total_s"] / per["total_s"], 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"atomic {result['rows_per_s']['atomic']} rows/s, commit {atomic['commit_s'] * 1000:.0f} ms; "
        f"per-participant {result['rows_per_s']['per-participant']} rows/s, commit {per['commit_s'] * 1000:.0f} ms "
        f"(total x{result['total_ratio_atomic_over_per_participant']}, commit "
        f"x{result['commit_latency_ratio_atomic_over_per_participant']}). Written to {RESULTS}."
    )


if __name__ == "__main__":
    main()
