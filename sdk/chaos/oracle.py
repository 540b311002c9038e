"""The chaos workload, its failure-free execution, and the checks of what a sink ends up holding.

The workload is a list of JSON files, one per micro-batch: rows ``{id, key, seq, token, amount}``
spread over a few keys. The job's stateful step keeps, per key, the running sum of ``amount``
(the aggregation) and the ``.``-joined tokens ordered by ``seq`` (the non-commutative step: the
result depends on the order batches are applied in). Per batch it emits one row per key the
batch touched: :data:`Row` ``(batch_id, key, running_sum, concat, n_tokens)``.

:func:`expected_rows` is the failure-free execution, computed here in plain Python with the same
:func:`advance` the job runs in Spark. :func:`verify` compares what the sink holds with it (or,
for a non-deterministic run, with what the attempts recorded): lost and duplicated rows, rows no
attempt computed, and breaks of the per-key chain (each concat must extend the previous one).
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eosink.checkpoint import SparkCheckpoint

__all__ = [
    "Attempts",
    "Row",
    "Verdict",
    "Workload",
    "advance",
    "batch_of_file",
    "combined",
    "expected_rows",
    "file_batch_ends",
    "read_attempts",
    "read_input",
    "spark_batches",
    "verify",
    "verify_naive",
    "write_input",
]

Row = tuple[int, str, int, str, int]
"""One output row: (batch_id, key, running_sum, concat, n_tokens)."""
SEP = "."
MAX_DETAILS = 20


@dataclass(frozen=True)
class Workload:
    """The generated input: ``files`` batches of ``rows`` rows over ``keys`` keys, from ``seed``."""

    files: int = 10
    rows: int = 24
    keys: int = 5
    seed: int = 0

    def to_json(self) -> dict[str, int]:
        return {"files": self.files, "rows": self.rows, "keys": self.keys, "seed": self.seed}


def write_input(directory: Path, workload: Workload) -> None:
    """Write the workload's files into ``directory`` (created), oldest first: Spark reads them in
    modification-time order, so file ``i`` is batch ``i``."""
    rng = random.Random(f"input-{workload.seed}")
    directory.mkdir(parents=True, exist_ok=True)
    seq = 0
    base = 1_600_000_000
    for b in range(workload.files):
        lines = []
        for i in range(workload.rows):
            seq += 1
            row = {
                "id": b * 100_000 + i,
                "key": f"k{rng.randrange(workload.keys)}",
                "seq": seq,
                "token": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3)),
                "amount": rng.randrange(1, 1000),
            }
            lines.append(json.dumps(row))
        path = directory / f"batch-{b:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (base + b, base + b))


def read_input(directory: Path) -> list[list[dict[str, Any]]]:
    """The input rows per batch (file order = batch order)."""
    return [
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for path in sorted(directory.glob("batch-*.json"))
    ]


def spark_batches(checkpoint: Path, files: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[Mapping[str, Any]]]:
    """The input rows of each micro-batch, as Spark's checkpoint planned them.

    Batch ``N`` is usually file ``N``, but not always: a crash between the file source's log and
    the offset log (``offsets/N``) makes the next run plan one batch over two files (see
    :meth:`~eosink.checkpoint.SparkCheckpoint.source_log_offsets`); entry ``i`` of the source's
    log is file ``i`` (one file per entry, taken in modification-time order). Files no batch has
    planned yet follow, one per batch.
    """
    out: list[list[Mapping[str, Any]]] = []
    start = 0
    for end in file_batch_ends(checkpoint):
        out.append([r for f in files[start : end + 1] for r in f])
        start = end + 1
    out.extend([list(f) for f in files[start:]])
    return out


def file_batch_ends(checkpoint: Path) -> list[int]:
    """Per planned batch ``0..N`` in order, the index of the last input file it covers (one file per log entry)."""
    ends = SparkCheckpoint(checkpoint).source_log_offsets()
    out: list[int] = []
    for batch_id in range(len(ends)):
        if batch_id not in ends:
            break
        out.append(ends[batch_id])
    return out


def batch_of_file(checkpoint: Path) -> dict[int, int]:
    """Input file index -> the batch Spark planned it into (files not planned yet are absent)."""
    found: dict[int, int] = {}
    start = 0
    for batch_id, end in enumerate(file_batch_ends(checkpoint)):
        for f in range(start, end + 1):
            found[f] = batch_id
        start = end + 1
    return found


def advance(state: tuple[int, str, int], rows: Iterable[tuple[int, str, int]]) -> tuple[int, str, int]:
    """One key's state ``(running_sum, concat, n_tokens)`` after a batch's ``(seq, token, amount)`` rows,
    applied in the order given (the job sorts them by ``seq``; the non-deterministic mode shuffles)."""
    total, concat, n = state
    for _, token, amount in rows:
        total += amount
        concat = f"{concat}{SEP}{token}" if concat else token
        n += 1
    return total, concat, n


def expected_rows(batches: Sequence[Sequence[Mapping[str, Any]]]) -> dict[tuple[int, str], Row]:
    """The failure-free execution: (batch_id, key) -> the row it emits."""
    state: dict[str, tuple[int, str, int]] = {}
    out: dict[tuple[int, str], Row] = {}
    for batch_id, rows in enumerate(batches):
        per_key: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
        for r in rows:
            per_key[r["key"]].append((r["seq"], r["token"], r["amount"]))
        for key, items in per_key.items():
            state[key] = advance(state.get(key, (0, "", 0)), sorted(items))
            out[(batch_id, key)] = (batch_id, key, *state[key])
    return out


Attempts = dict[int, list[frozenset[Row]]]
"""batch_id -> the row sets computed by each attempt of that batch (the job's oracle log)."""


def read_attempts(paths: Iterable[Path]) -> Attempts:
    """Parse the job's oracle logs: one JSON line per attempt of a batch (a torn last line is skipped)."""
    attempts: Attempts = defaultdict(list)
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # the process was killed while writing this line
            b = int(rec["batch"])
            rows = frozenset((b, str(k), int(s), str(c), int(n)) for k, s, c, n in rec["rows"])
            if rows not in attempts[b]:
                attempts[b].append(rows)
    return dict(attempts)


@dataclass
class Verdict:
    """What a sink holds against the oracle. ``ok`` when nothing is lost, duplicated or inconsistent."""

    expected: int = 0
    found: int = 0
    lost: int = 0
    duplicated: int = 0
    mismatched: int = 0
    not_an_attempt: int = 0
    chain_breaks: int = 0
    incomplete_keys: int = 0
    details: list[str] = field(default_factory=list)
    sinks: dict[str, Any] = field(default_factory=dict)
    """Each sink's own verdict, where one schedule wrote several (a fan-out); empty otherwise."""

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.duplicated
            or self.mismatched
            or self.not_an_attempt
            or self.chain_breaks
            or self.incomplete_keys
        )

    def note(self, text: str) -> None:
        if len(self.details) < MAX_DETAILS:
            self.details.append(text)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["ok"] = self.ok
        return data


def verify(
    found: Sequence[Row],
    batches: Sequence[Sequence[Mapping[str, Any]]],
    *,
    deterministic: bool = True,
    attempts: Attempts | None = None,
    upto: int | None = None,
) -> Verdict:
    """Check the sink's rows ``found`` against the input ``batches``.

    * lost / duplicated: per (batch_id, key) the sink must hold exactly one row, for every key
      each batch touched (batches after ``upto`` excluded: a run stopped there on purpose);
    * mismatched (deterministic runs): each row equals the failure-free execution's;
    * not_an_attempt: each batch's rows are exactly the rows one recorded attempt computed;
    * chain_breaks: per key, in batch order, the running sum grows by the batch's amounts, the
      count by its rows, and the concat extends the previous concat by the batch's tokens: the
      result of one execution, whatever the order within a batch;
    * incomplete_keys (complete runs): each key's last concat holds every token of its input once.
    """
    limit = len(batches) - 1 if upto is None else upto
    want = {bk: row for bk, row in expected_rows(batches[: limit + 1]).items()}
    v = Verdict(expected=len(want), found=len(found))
    by_pair: dict[tuple[int, str], list[Row]] = defaultdict(list)
    for row in found:
        by_pair[(row[0], row[1])].append(row)
    for pair in want:
        if pair not in by_pair:
            v.lost += 1
            v.note(f"lost: batch {pair[0]} key {pair[1]}")
    for pair, rows in sorted(by_pair.items()):
        if len(rows) > 1:
            v.duplicated += len(rows) - 1
            v.note(f"duplicated: batch {pair[0]} key {pair[1]} x{len(rows)}")
        if pair not in want:
            v.duplicated += 1 if len(rows) == 1 else 0
            v.note(f"unexpected: batch {pair[0]} key {pair[1]}")
        elif deterministic and any(r != want[pair] for r in rows):
            v.mismatched += 1
            v.note(f"mismatched: {rows[0]} != {want[pair]}")
    if attempts is not None:
        per_batch: dict[int, set[Row]] = defaultdict(set)
        for row in found:
            per_batch[row[0]].add(row)
        for b, rows_b in sorted(per_batch.items()):
            if frozenset(rows_b) not in attempts.get(b, []):
                v.not_an_attempt += 1
                v.note(f"batch {b}: the sink's rows are not what any recorded attempt computed")
    _check_chains(v, by_pair, batches, limit, complete=upto is None)
    return v


def _check_chains(
    v: Verdict,
    by_pair: Mapping[tuple[int, str], list[Row]],
    batches: Sequence[Sequence[Mapping[str, Any]]],
    limit: int,
    *,
    complete: bool,
) -> None:
    per_key: dict[str, list[Row]] = defaultdict(list)
    for (_, key), rows in sorted(by_pair.items()):
        per_key[key].append(rows[0])
    inputs: dict[tuple[int, str], list[Mapping[str, Any]]] = defaultdict(list)
    all_tokens: dict[str, Counter[str]] = defaultdict(Counter)
    for b, batch in enumerate(batches[: limit + 1]):
        for r in batch:
            inputs[(b, r["key"])].append(r)
            all_tokens[r["key"]][r["token"]] += 1
    for key, chain in per_key.items():
        prev: tuple[int, str, int] = (0, "", 0)
        for b, _, total, concat, n in chain:
            items = inputs.get((b, key), [])
            added = concat[len(prev[1]) + (1 if prev[1] else 0) :].split(SEP) if concat != prev[1] else []
            if (
                total != prev[0] + sum(r["amount"] for r in items)
                or n != prev[2] + len(items)
                or not concat.startswith(prev[1])
                or Counter(added) != Counter(r["token"] for r in items)
            ):
                v.chain_breaks += 1
                v.note(f"chain break: key {key} batch {b}: {prev} -> {(total, concat, n)}")
            prev = (total, concat, n)
        if complete and Counter(prev[1].split(SEP) if prev[1] else []) != all_tokens[key]:
            v.incomplete_keys += 1
            v.note(f"key {key}: the last concat does not hold every token once")
    if complete:
        for key in all_tokens.keys() - per_key.keys():
            v.incomplete_keys += 1
            v.note(f"key {key}: no row at all")


def verify_naive(found: Sequence[Row], batches: Sequence[Sequence[Mapping[str, Any]]]) -> Verdict:
    """The baseline's check: multisets of full rows against the failure-free execution."""
    want = Counter(expected_rows(batches).values())
    got = Counter(found)
    v = Verdict(expected=sum(want.values()), found=len(found))
    v.lost = sum((want - got).values())
    v.duplicated = sum((got - want).values())
    for row, n in list((got - want).items())[:5]:
        v.note(f"extra x{n}: {row}")
    for row, n in list((want - got).items())[:5]:
        v.note(f"missing x{n}: {row}")
    return v


def combined(verdicts: Mapping[str, Verdict]) -> Verdict:
    """One verdict over several sinks (a fan-out, or one sink under its name): the counts add up, each detail
    names its sink when there are several, and ``sinks`` keeps each sink's own verdict."""
    if len(verdicts) == 1:
        return next(iter(verdicts.values()))
    total = Verdict()
    for name, v in verdicts.items():
        for counter in ("expected", "found", "lost", "duplicated", "mismatched", "not_an_attempt"):
            setattr(total, counter, getattr(total, counter) + getattr(v, counter))
        total.chain_breaks += v.chain_breaks
        total.incomplete_keys += v.incomplete_keys
        for detail in v.details:
            total.note(f"{name}: {detail}")
        total.sinks[name] = v.to_json()
    return total
