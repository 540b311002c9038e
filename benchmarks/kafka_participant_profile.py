"""Where a Kafka participant's time goes: one participant's write path under cProfile, now and at a past revision.

The path is what a participant does with its share of a batch, without Spark: the benchmark's
data set (``eosink.bench.datasets``: id, name, amount, at, note) in Arrow batches of 10,000 rows
(Spark's ``maxRecordsPerBatch``), each turned into JSON records and handed to a producer in bulk,
then one flush, against the harness broker (``eosink services up kafka``). ``--before REV``
profiles the same path with the record and bulk modules of git revision ``REV`` loaded in their
place (the rest of the package as it is now), so both runs share the broker, the data and the
machine.

    .venv/bin/python benchmarks/kafka_participant_profile.py [--rows 200000] [--before ea9e813]

It prints each run's rows/s (timed without the profiler) and its functions by own time, and writes
``benchmarks/results/kafka-participant-profile.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib.util
import json
import os
import platform
import pstats
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "kafka-participant-profile.json"


def _modules_at(rev: str) -> tuple[types.ModuleType, types.ModuleType]:
    """``_records`` and ``_bulk`` as they were at ``rev`` (loaded under other names)."""
    loaded = []
    for name in ("_records", "_bulk"):
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:connectors/kafka/{name}.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if name == "_bulk":
            source = source.replace("eosink.connectors.kafka._records", "eosink_before_records")
        spec = importlib.util.spec_from_loader(f"eosink_before{name}", loader=None)
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        exec(compile(source, f"{rev}:connectors/kafka/{name}.py", "exec"), module.__dict__)
        loaded.append(module)
    return loaded[0], loaded[1]


def _run(
    records_module: Any, bulk_module: Any, batches: list[Any], bootstrap: str, topic: str, profiled: bool
) -> dict[str, Any]:
    from kafka import KafkaProducer

    from eosink.connectors.kafka import KafkaConfig

    config = KafkaConfig(bootstrap, topic=topic, value_format="json")
    producer = KafkaProducer(**config.producer_kwargs())
    errors: list[BaseException] = []
    sender = bulk_module.BulkSender(producer, errors.append)
    profile = cProfile.Profile()
    started = time.perf_counter()
    if profiled:
        profile.enable()
    rows = 0
    for batch in batches:
        records = records_module.to_records(
            batch, value_format="json", default_topic=topic, upsert_keys=(), limit=config.record_limit, where="profile"
        )
        sender.send(records)
        rows += batch.num_rows
    producer.flush()
    profile.disable()
    seconds = time.perf_counter() - started
    sender.check("profile")
    producer.close(timeout=10)
    assert not errors, errors
    if not profiled:
        return {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds)}
    stats = pstats.Stats(profile)
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:12]  # type: ignore[attr-defined]
    return {
        "profiled_s": round(total, 3),
        "top": [
            {
                "function": f"{Path(f).name}:{line}({fn})",
                "calls": v[1],
                "own_s": round(v[2], 3),
                "share": round(v[2] / total, 3),
            }
            for (f, line, fn), v in top
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--before", default=None, help="a git revision whose record and bulk modules to profile too")
    args = parser.parse_args()

    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    import eosink.connectors.kafka._bulk as bulk_now
    import eosink.connectors.kafka._records as records_now
    from eosink.bench.datasets import generate
    from eosink.services.kafka import KafkaService

    bootstrap = KafkaService().endpoint().bootstrap_servers  # the running service, or EOSINK_KAFKA_BOOTSTRAP
    batches = [b for t in generate(args.rows) for b in t.to_batches(max_chunksize=10_000)]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    runs: dict[str, Any] = {}
    plans: list[tuple[str, Any, Any]] = []
    if args.before:
        plans.append((f"before ({args.before})", *_modules_at(args.before)))
    plans.append(("now", records_now, bulk_now))
    for name, records_module, bulk_module in plans:
        topic = f"eosink_profile_{uuid.uuid4().hex[:8]}"
        admin.create_topics([NewTopic(topic, 1, 1)])
        try:  # timed without the profiler (it costs per call, and the per-row path makes more calls), then profiled
            run = _run(records_module, bulk_module, batches, bootstrap, topic, profiled=False)
            run |= _run(records_module, bulk_module, batches, bootstrap, topic, profiled=True)
        finally:
            admin.delete_topics([topic])
        runs[name] = run
        print(f"\n{name}: {run['rows']:,} rows in {run['seconds']:.2f} s, {run['rows_per_s']:,} rows/s")
        print("| function | calls | own s | share |\n|---|---:|---:|---:|")
        for t in run["top"]:
            print(f"| `{t['function']}` | {t['calls']:,} | {t['own_s']:.3f} | {t['share']:.0%} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} at the end",
                "rows": args.rows,
                "runs": runs,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwritten to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
