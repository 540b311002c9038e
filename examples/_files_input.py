"""The input side the file examples share: directories of JSON payment files, one payment per line."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from _spark import builder
from pyspark.sql import DataFrame, SparkSession

import eosink

SCHEMA = "id LONG, account STRING, amount LONG"


def generate(inbox: Path, files: int, rows: int) -> None:
    """Append ``files`` new payment files to ``inbox`` (ids continue where the last file stopped)."""
    inbox.mkdir(parents=True, exist_ok=True)
    start = len(list(inbox.glob("payments-*.json")))
    rng = random.Random(start)
    for n in range(start, start + files):
        payments = [
            {"id": n * 10_000 + i, "account": f"acct-{rng.randrange(5)}", "amount": rng.randrange(1, 500)}
            for i in range(rows)
        ]
        (inbox / f"payments-{n:05d}.json").write_text("".join(json.dumps(p) + "\n" for p in payments))


def parser(doc: str, checkpoint: str = "Spark's checkpoint directory for this query") -> argparse.ArgumentParser:
    """The options every file example takes (--input, --checkpoint, --strategy, --generate, --rows); each
    example adds its target's."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--input", required=True, help="directory of JSON payment files")
    ap.add_argument("--checkpoint", required=True, help=checkpoint)
    ap.add_argument("--strategy", choices=["2pc", "txid-check", "idempotent"], default="2pc")
    ap.add_argument("--generate", type=int, default=0, metavar="N", help="first write N new files of payments")
    ap.add_argument("--rows", type=int, default=100, help="payments per generated file")
    return ap


def generated(args: argparse.Namespace) -> None:
    """Write the payment files --generate asks for."""
    if args.generate:
        generate(Path(args.input), args.generate, args.rows)


def strategy(name: str) -> eosink.Idempotent | str:
    """--strategy as foreach_batch takes it: the idempotent strategy keys payments by their id."""
    return eosink.Idempotent(["id"]) if name == "idempotent" else name


def payment_stream(app_name: str, inbox: str) -> tuple[SparkSession, DataFrame]:
    """A Spark session (``local[2]``, or spark-submit's master), and the stream of the payments in ``inbox`` (two
    files per micro-batch)."""
    spark = builder(app_name).getOrCreate()
    return spark, spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).json(inbox)
