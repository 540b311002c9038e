"""Files -> Spark -> eosink -> the reference sink, exactly once.

Run:  .venv/bin/python examples/files_to_reference_sink.py /tmp/eosink-example
Drops a few JSON files into <dir>/input, streams them through eosink's two-phase commit into
<dir>/ledger.db, and prints what the sink holds. Run it twice: the second run finds nothing new.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from _spark import builder

import eosink
from eosink.connectors.reference import ReferenceSink


def main(root: Path) -> None:
    inbox = root / "input"
    inbox.mkdir(parents=True, exist_ok=True)
    for n in range(3):
        path = inbox / f"payments-{n}.json"
        if not path.exists():
            rows = [{"id": n * 100 + i, "account": f"acct-{i % 3}", "amount": 10 * i} for i in range(5)]
            path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = builder("eosink-example-payments").getOrCreate()
    checkpoint = str(root / "checkpoint")
    sink = ReferenceSink(root / "ledger.db")
    writer = eosink.foreach_batch(sink, app_id="example-payments", strategy="2pc", checkpoint_location=checkpoint)
    stream = spark.readStream.schema("id LONG, account STRING, amount LONG").json(str(inbox))
    writer.start(stream.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()
    spark.stop()
    rows = sink.rows("example-payments")
    print(f"{len(rows)} rows, {len(sink.bundles('example-payments'))} committed batches in {sink.path}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/eosink-example"))
