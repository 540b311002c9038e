"""``eosink demo``: a streaming job crashed mid-protocol and restarted, eosink vs plain foreachBatch.

Two parts:

* :func:`job_main` is one Spark streaming driver: payments read from JSON files, one file per
  micro-batch (``trigger(availableNow=True)``), written into a :class:`ReferenceSink` through
  eosink or through a plain at-least-once ``foreachBatch``. Fault points come from
  ``EOSINK_FAULTS``. The kill-and-restart tests run this same job.
* :func:`demo_main` generates payments, runs the eosink job under a seeded crash (SIGKILL of the
  driver's whole session) and a lost COMMIT reply, restarts it from its checkpoint, does the same
  with the plain writer, and prints what each sink holds against what was sent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from eosink._procs import kill_session, spark_cds_options

__all__ = ["demo_main", "job_main"]

JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Quick JVM start for short runs: C1 compiler only, serial GC."""
SCHEMA = "id LONG, account STRING, amount LONG"
EXIT_EOSINK_ERROR = 3


# -- the streaming job ----------------------------------------------------------------------------


def _naive_partition_writer(path: str, atomic: bool, batch_id: int) -> Callable[[Iterator[pa.RecordBatch]], Any]:
    """A plain at-least-once writer: rows become visible as they are written, no bookkeeping."""

    def part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eosink.connectors.reference import ReferenceSink
        from eosink.contract import BatchRef, TaskRef

        sink = ReferenceSink(path, atomic=atomic)
        task = TaskRef(BatchRef("naive", batch_id), 0, 0, os.urandom(8).hex(), None, False)
        txn = None
        for b in batches:
            if b.num_rows:
                txn = txn or sink.begin(task)
                sink.write(txn, b)
        if txn is not None:
            sink.pre_commit(txn)
        yield pa.RecordBatch.from_pydict({"ok": pa.array([1], pa.int64())})

    return part


def _job_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="eosink job", description="One Spark streaming driver (demo and tests).")
    ap.add_argument("--input", required=True, help="directory of JSON files, one per micro-batch")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--sink", required=True, help="ReferenceSink SQLite file")
    ap.add_argument("--app-id", default="demo")
    ap.add_argument("--strategy", default="2pc")
    ap.add_argument("--mode", choices=["eosink", "naive"], default="eosink")
    ap.add_argument("--master", default="local[2,4]", help="local[N,maxFailures] retries failed tasks")
    ap.add_argument("--atomic", type=int, default=1, help="0: the sink commits a batch in several steps")
    ap.add_argument("--nondeterministic", action="store_true", help="add rand() to every row")
    ap.add_argument("--participants", type=int, default=3)
    ap.add_argument("--key-columns", default="", help="comma-separated user keys for the idempotent strategy")
    ap.add_argument("--stats-out")
    return ap.parse_args(argv)


def job_session(master: str, app_name: str) -> Any:
    """A SparkSession for a test or demo job: no UI, small files split into several participants,
    fault points armed on executors from ``EOSINK_FAULTS`` (they kill the group ``EOSINK_FAULT_PGID``),
    and ``spark.driver.maxResultSize=1m`` so that a driver collecting rows would fail."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("EOSINK_FAULT_PGID", str(os.getpgrp()))
    java_opts = f"{JAVA_OPTS} {os.environ.get('EOSINK_DRIVER_JAVA_OPTS', '')}".strip()
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", JAVA_OPTS)
        .config("spark.driver.maxResultSize", "1m")  # the driver collects committables, never rows
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.files.maxPartitionBytes", "2048")  # several participants per small file
        .config("spark.sql.files.openCostInBytes", "0")
        .config("spark.executorEnv.EOSINK_FAULTS", os.environ.get("EOSINK_FAULTS", ""))
        .config("spark.executorEnv.EOSINK_FAULT_LOG", os.environ.get("EOSINK_FAULT_LOG", ""))
        .config("spark.executorEnv.EOSINK_FAULT_PGID", os.environ["EOSINK_FAULT_PGID"])
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def job_main(argv: Sequence[str] | None = None) -> int:
    """Run the streaming job to the end of its input; 0 when done, 3 on an eosink error."""
    args = _job_args(argv)
    # Fault points inside Spark's Python workers (process groups of their own) crash this driver.
    os.environ["EOSINK_FAULT_PGID"] = str(os.getpgrp())
    from pyspark.sql import functions as F

    import eosink
    from eosink import faults
    from eosink.connectors.reference import ReferenceSink
    from eosink.faults import FaultPoint

    spark = job_session(args.master, "eosink-demo")
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    if args.nondeterministic:
        df = df.withColumn("noise", F.rand())

    writer: eosink.BatchWriter | None = None
    fn: Callable[[Any, int], None]
    if args.mode == "eosink":
        writer = eosink.foreach_batch(
            ReferenceSink(args.sink, atomic=bool(args.atomic)),
            app_id=args.app_id,
            strategy=eosink.Idempotent(args.key_columns.split(",")) if args.key_columns else args.strategy,
            checkpoint_location=args.checkpoint,
            participants=args.participants,
        )
        fn = writer
    else:

        def fn(batch_df: Any, batch_id: int) -> None:
            batch_df.mapInArrow(_naive_partition_writer(args.sink, bool(args.atomic), batch_id), "ok long").collect()
            faults.hit(FaultPoint.F8, batch_id)  # the same crash window eosink is tested in

    query = df.writeStream.option("checkpointLocation", args.checkpoint).foreachBatch(fn)
    try:
        query.trigger(availableNow=True).start().awaitTermination()
        if writer is not None:
            writer.close()
    except Exception as exc:
        text = str(exc)
        names = [n for n in eosink.errors.__all__ if n in text]
        kind = max(names, key=len) if names else type(exc).__name__
        print(f"EOSINK-ERROR {kind}: {text[:2000]}", file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_EOSINK_ERROR
    if args.stats_out and writer is not None:
        Path(args.stats_out).write_text(json.dumps(writer.stats.to_json()))
    spark.stop()
    return 0


# -- the demo -------------------------------------------------------------------------------------

_LABELS = {"eosink": "eosink", "naive": "plain foreachBatch"}
_JAVA_OPTS: dict[str, str] = {}
CRASH_POINTS = {"2pc": ["F3", "F4", "F5", "F8"], "txid-check": ["F3", "F4", "F8"], "idempotent": ["F3", "F4", "F8"]}


@dataclass
class _Outcome:
    label: str
    crashes: int = 0
    notes: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    found: Counter[tuple[Any, ...]] = field(default_factory=Counter)


def _write_payments(directory: Path, batches: int, rows: int, rng: random.Random) -> Counter[tuple[Any, ...]]:
    directory.mkdir(parents=True)
    expected: Counter[tuple[Any, ...]] = Counter()
    for b in range(batches):
        lines = []
        for i in range(rows):
            row = (b * 100_000 + i, f"acct-{rng.randrange(8):02d}", rng.randrange(1, 50_000))
            expected[row] += 1
            lines.append(json.dumps({"id": row[0], "account": row[1], "amount": row[2]}))
        (directory / f"payments-{b:04d}.json").write_text("\n".join(lines) + "\n")
    return expected


def _run_job(work: Path, mode: str, strategy: str, faults: str | None, say: Callable[[str], None]) -> int:
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        EOSINK_FAULT_LOG=str(work / f"{mode}-faults.log"),
        EOSINK_DRIVER_JAVA_OPTS=_JAVA_OPTS.get("driver", ""),
    )
    env.pop("EOSINK_FAULTS", None)
    if faults:
        env["EOSINK_FAULTS"] = faults
    cmd = [
        sys.executable,
        "-m",
        "eosink.demo",
        "job",
        "--input",
        str(work / "input"),
        "--checkpoint",
        str(work / f"{mode}-checkpoint"),
        "--sink",
        str(work / f"{mode}.db"),
        "--mode",
        mode,
        "--strategy",
        strategy,
        "--stats-out",
        str(work / f"{mode}-stats.json"),
    ]
    say(f"  spark driver ({_LABELS[mode]}{', faults ' + faults if faults else ''}) ...")
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, err = proc.communicate()
    kill_session(proc.pid)  # a killed driver leaves its JVM and workers behind
    if proc.returncode not in (0, -signal.SIGKILL):
        say(err[-3000:])
    return proc.returncode


def _scenario(work: Path, mode: str, strategy: str, runs: list[str | None], say: Callable[[str], None]) -> _Outcome:
    """Run the job once per entry of ``runs`` (fault specs), restarting from the same checkpoint."""
    from eosink.connectors.reference import ReferenceSink

    outcome = _Outcome(_LABELS[mode])
    for spec in runs:
        code = _run_job(work, mode, strategy, spec, say)
        if code == -signal.SIGKILL:
            outcome.crashes += 1
            say("    killed (SIGKILL of the driver's whole session); restarting from the checkpoint")
        elif code != 0:
            raise SystemExit(f"the {mode} driver failed with exit code {code}")
    stats_path = work / f"{mode}-stats.json"
    outcome.stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    rows = ReferenceSink(work / f"{mode}.db").rows("demo" if mode == "eosink" else "naive")
    outcome.found = Counter((r["id"], r["account"], r["amount"]) for r in rows)
    return outcome


def _balances(rows: Counter[tuple[Any, ...]]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for (_, account, amount), n in rows.items():
        totals[account] += amount * n
    return dict(totals)


def demo_main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; 0 when eosink's sink holds exactly what was sent."""
    ap = argparse.ArgumentParser(prog="eosink demo", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--strategy", choices=sorted(CRASH_POINTS), default="2pc")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--rows", type=int, default=200, help="payments per batch")
    ap.add_argument("--workdir", help="keep the run's files here (default: a temporary directory)")
    args = ap.parse_args(argv)
    if args.batches < 3:
        ap.error("--batches must be at least 3")
    if shutil.which("java") is None:
        print(
            "Spark needs Java 17 or newer and 'java' is not on PATH.\n"
            "Install it, e.g. `sudo apt-get install openjdk-17-jre-headless`, then run `make demo` again.",
            file=sys.stderr,
        )
        return 2

    def say(text: str) -> None:
        print(text, flush=True)

    say("preparing Spark's JVM start-up archive (first run only) ...")
    _JAVA_OPTS["driver"] = spark_cds_options()
    rng = random.Random(args.seed)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="eosink-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    expected = _write_payments(work / "input", args.batches, args.rows, rng)
    crash_batch = rng.randrange(1, args.batches - 1)
    point = rng.choice(CRASH_POINTS[args.strategy])
    lost_reply_batch = rng.randrange(crash_batch + 1, args.batches)
    say(
        f"eosink demo: {args.batches} batches x {args.rows} payments, strategy {args.strategy!r}, "
        f"seed {args.seed}, files in {work}"
    )
    say(f"eosink writer: crash at {point} of batch {crash_batch}, then a lost COMMIT reply at batch {lost_reply_batch}")
    eos = _scenario(
        work, "eosink", args.strategy, [f"{point}@{crash_batch}:kill", f"F7@{lost_reply_batch}:ambiguous"], say
    )
    say(f"plain foreachBatch writer: crash after writing batch {crash_batch}, before Spark's commit log")
    naive = _scenario(work, "naive", args.strategy, [f"F8@{crash_batch}:kill", None], say)

    want = _balances(expected)
    exact = True
    say("")
    say(f"{'writer':<20}{'crashes':>8}{'expected':>10}{'found':>8}{'lost':>7}{'dupl.':>7}{'balances':>10}")
    for o in (eos, naive):
        lost = sum((expected - o.found).values())
        dup = sum((o.found - expected).values())
        ok_bal = _balances(o.found) == want
        say(
            f"{o.label:<20}{o.crashes:>8}{sum(expected.values()):>10}{sum(o.found.values()):>8}"
            f"{lost:>7}{dup:>7}{'ok' if ok_bal else 'WRONG':>10}"
        )
        if o is eos:
            exact = lost == 0 and dup == 0 and ok_bal
    s = eos.stats
    say("")
    say(
        f"eosink after the restart: {s.get('recovered_forward', 0)} batch(es) rolled forward, "
        f"{s.get('recovered_aborted', 0)} aborted and redone, {s.get('orphans_aborted', 0)} leftover attempt(s) "
        f"aborted, {s.get('replays_skipped', 0)} replay(s) skipped, {s.get('ambiguous_commits', 0)} ambiguous "
        f"commit(s) resolved by asking the sink ({s.get('ambiguous_resolved_committed', 0)} found committed)."
    )
    say(
        "PROVED: every payment landed exactly once through eosink."
        if exact
        else "FAILED: eosink's sink does not hold exactly what was sent."
    )
    return 0 if exact else 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["job"]:
        return job_main(argv[1:])
    return demo_main(argv[1:] if argv[:1] == ["demo"] else argv)


if __name__ == "__main__":
    sys.exit(main())
