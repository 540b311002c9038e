"""The input side the file examples share: directories of JSON payment files, one payment per line."""

from __future__ import annotations

import json
import random
from pathlib import Path

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
