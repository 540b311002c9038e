"""``eosink chaos``: the end-to-end chaos harness (``make chaos SINK=postgres SCHEDULES=N [SEED=S]``).

Runs, per strategy, ``--schedules`` seeded fault schedules against a real Spark streaming job
writing into the sink through eosink (schedule ``k`` uses seed ``SEED + k``), the plain
``foreachBatch`` baseline under the same kills, and the non-deterministic mode; writes the
report to ``results/chaos-<sink>.json`` and prints a table. Exit code 1 when a schedule failed
(each failure prints the command that replays it alone), 2 on a usage error.

``--topology replicated`` (PostgreSQL): the sink on a private primary with a synchronous and an
asynchronous standby; failovers and replication link cuts join the faults, every schedule runs
under ``--replication`` ``sync`` and ``async`` (both by default), and a batch an asynchronous
failover dropped must be detected (CommittedWorkLostError) and landed by ``eosink recover
--rewind``; the report goes to ``results/chaos-<sink>-replicated.json``.

``--topology cluster`` (Kafka): the sink on a private three-node cluster (replication factor 3,
``min.insync.replicas=2``); the sink restart gives way to a partition leader or the transaction
coordinator SIGKILLed, a node paused past its session timeout and resumed, and an ``EndTxn`` held
past the job's request timeout, then delivered. The rows are read by an independent
``read_committed`` reader (confluent-kafka), which also reports torn batches and hanging
transactions; the plain baseline (Spark's Kafka sink, the same kills) runs beside it, not the
non-deterministic mode; the report goes to ``results/chaos-<sink>-cluster.json``.

``--topology cluster`` (S3, Delta): the sink on a private four-node MinIO behind a balancer; the sink
restart gives way to a node SIGKILLed (started again when the run ends), and the commit's reply is cut at
the balancer. S3's rows are read with pyarrow's S3 client, which also reports torn batches; Delta's by
its engines. ``--topology ha`` (HDFS): the sink on a private HA name service (two NameNodes, three
JournalNodes); the sink restart gives way to a failover (the active NameNode stopped, its standby made
active), the commit's rename reply is cut at the active NameNode, and the rows are read over WebHDFS,
which also reports torn batches; the report goes to ``results/chaos-<sink>-ha.json``. Only eosink's
schedules run on these.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]

MODES = ("eosink", "naive", "nondeterministic")


def _parser() -> argparse.ArgumentParser:
    from eosink.chaos.runner import STRATEGIES
    from eosink.chaos.schedule import TOPOLOGIES
    from eosink.profiles import profile_names, sink_argument

    ap = argparse.ArgumentParser(prog="eosink chaos", description=__doc__.split("\n\n")[1] if __doc__ else None)
    sinks = profile_names("chaos_target")
    ap.add_argument(
        "--sink",
        default="postgres",
        type=sink_argument("chaos_target"),
        help=f"the sink to test: {', '.join(sinks)}; a fan-out: several joined by +, e.g. postgres+kafka "
        "(default: postgres)",
    )
    ap.add_argument("--schedules", type=int, default=2, help="schedules per strategy (default: 2)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the first schedule (default: 1)")
    ap.add_argument(
        "--strategy", action="append", choices=STRATEGIES, help="a strategy to test (repeatable; default: all)"
    )
    ap.add_argument("--only", action="append", choices=MODES, help="run only this part (repeatable; default: all)")
    ap.add_argument("--files", type=int, default=12, help="micro-batches per schedule (default: 12)")
    ap.add_argument("--rows", type=int, default=20, help="rows per micro-batch (default: 20)")
    ap.add_argument("--keys", type=int, default=5, help="distinct keys (default: 5)")
    ap.add_argument("--kills", type=int, choices=[2, 3], default=3, help="kills per schedule (default: 3)")
    ap.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        default="single",
        help="single (one server), replicated (a primary with standbys that fail over; PostgreSQL), cluster "
        "(Kafka's three nodes whose leaders and coordinator fail; MinIO's four, for S3 and Delta) or ha (HDFS's "
        "two NameNodes that fail over)",
    )
    ap.add_argument(
        "--replication",
        action="append",
        choices=("sync", "async"),
        help="with --topology replicated: the replication mode to run each schedule under (repeatable; default: both)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="the quick mode `make test` runs: 1 schedule, 8 batches of 12 rows, 2 kills (5 faults) per schedule",
    )
    ap.add_argument("--master", default=os.environ.get("EOSINK_TEST_MASTER", "local[2,4]"))
    ap.add_argument("--out", help="the report's path (default: results/chaos-<sink>.json)")
    ap.add_argument("--workdir", help="keep each schedule's input, checkpoint and logs here (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the tables of each schedule (and the workdir)")
    ap.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("EOSINK_CHAOS_JOBS", "1")),
        help="schedules run at once, each against a private server of its own (default: 1)",
    )
    ap.add_argument(
        "--resume",
        action="store_true",
        help="with --workdir: skip the schedules a previous, interrupted run of the same command finished",
    )
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run the harness; 0 when every schedule passed."""
    args = _parser().parse_args(argv)
    if args.quick:
        args.schedules, args.files, args.rows, args.kills = 1, 8, 12, 2
    if args.schedules < 1 or args.files < 8:
        print(
            "eosink chaos: --schedules must be >= 1 and --files >= 8 (a schedule's faults need batches).",
            file=sys.stderr,
        )
        return 2
    if args.jobs < 1 or (args.resume and not args.workdir):
        print(
            "eosink chaos: --jobs must be >= 1, and --resume needs the --workdir of the run to resume.",
            file=sys.stderr,
        )
        return 2
    if shutil.which("java") is None:
        print(
            "eosink chaos: Spark needs Java 17+ on PATH (e.g. apt-get install openjdk-17-jre-headless).",
            file=sys.stderr,
        )
        return 2
    from eosink._procs import spark_cds_options
    from eosink.chaos.oracle import Workload
    from eosink.chaos.report import format_table
    from eosink.chaos.runner import STRATEGIES, run_chaos

    def say(text: str) -> None:
        print(text, flush=True)

    replicated = args.topology == "replicated"
    if args.replication and not replicated:
        print("eosink chaos: --replication needs --topology replicated.", file=sys.stderr)
        return 2
    several = args.topology != "single"
    on_cluster = {"eosink", "naive"} if args.sink == "kafka" else {"eosink"}  # Spark's Kafka sink on the cluster
    allowed = {"single": set(MODES), "replicated": {"eosink"}, "cluster": on_cluster, "ha": {"eosink"}}[args.topology]
    if not set(args.only or ()) <= allowed:
        parts = " and ".join(f"--only {m}" for m in MODES if m in allowed)
        print(f"eosink chaos: --topology {args.topology} runs {parts} only.", file=sys.stderr)
        return 2
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="eosink-chaos-"))
    suffix = f"-{args.topology}" if several else ""
    out = Path(args.out or Path("results") / f"chaos-{args.sink}{suffix}.json")
    strategies = tuple(args.strategy or STRATEGIES)
    modes = tuple(args.only or (m for m in MODES if m in allowed))
    replications = tuple(args.replication or ("sync", "async"))
    on = {
        "single": "one server",
        "replicated": f"a replicated server ({', '.join(replications)} replication)",
        "cluster": "a cluster of nodes",
        "ha": "an HA name service (two NameNodes)",
    }[args.topology]
    say(
        f"eosink chaos: sink {args.sink} on {on}, {args.schedules} schedule(s) per strategy from seed {args.seed}, "
        f"strategies {', '.join(strategies)}, parts {', '.join(modes)}, {args.jobs} at once; work in {workdir}"
    )
    java_opts = spark_cds_options()
    try:
        report = run_chaos(
            args.sink,
            seed=args.seed,
            schedules=args.schedules,
            strategies=strategies,
            modes=modes,
            workload=Workload(files=args.files, rows=args.rows, keys=args.keys, seed=args.seed),
            workdir=workdir,
            master=args.master,
            java_opts=java_opts,
            keep=args.keep,
            kills=args.kills,
            jobs=args.jobs,
            resume=args.resume,
            say=say,
            topology=args.topology,
            replications=replications,
        )
    finally:
        if not (args.workdir or args.keep):
            shutil.rmtree(workdir, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    shutil.rmtree(workdir / "journal", ignore_errors=True)  # complete: the next run starts afresh
    say("")
    say(format_table(report))
    say("")
    for f in report["failed"]:
        say(f"FAILED {f['strategy']} ({f['mode']}), seed {f['seed']}: {f['failure']}")
        say(f"  replay: {f['replay']}")
    if "naive" in modes and not report["naive"]["shows_problem"]:
        say("note: the plain foreachBatch baseline lost and duplicated nothing under these schedules.")
    say(f"report: {out} ({report['duration_s']:.0f} s)")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
