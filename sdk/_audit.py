"""What the independent readers of fault tests and chaos runs share (Kafka's, S3's, HDFS's ``audit`` modules): the
tally of a final read against the rows a test wrote, and the part of a verdict every reader reports."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReadVerdict", "keyed", "tally"]


@dataclass
class ReadVerdict:
    """What a reader found; :attr:`problems` is empty when the sink was exactly-once. A reader's own verdict adds
    what only it can see."""

    rows: int
    """Rows read (every copy)."""
    lost: int
    duplicated: int
    strangers: int
    """Rows the test never wrote (e.g. an attempt's whose data differed from the committed one)."""
    vanished: int = 0
    """Distinct rows read during the run that the final read no longer finds."""
    torn: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = [f"{n} {what}" for n, what in ((self.lost, "lost"), (self.duplicated, "duplicated")) if n]
        found += [f"{self.strangers} rows never written"] if self.strangers else []
        found += [f"{self.vanished} rows read during the run and gone after"] if self.vanished else []
        return found + [f"torn: {t}" for t in self.torn]


def keyed(rows: Counter[str], key: Callable[[dict[str, Any]], Any] | None) -> Counter[Any]:
    """Canonical JSON rows counted by ``key`` of each (the columns a test's input names a row by); as they are
    without one."""
    if key is None:
        return rows
    out: Counter[Any] = Counter()
    for row, n in rows.items():
        out[key(json.loads(row))] += n
    return out


def tally(final: Counter[Any], expected: Counter[Any], seen: Iterable[Any]) -> dict[str, int]:
    """The final read against the rows expected, and the rows ``seen`` during the run: the counts of a
    :class:`ReadVerdict` (``rows``, ``lost``, ``duplicated``, ``strangers``, ``vanished``)."""
    extra = final - expected
    strangers = sum(n for row, n in extra.items() if row not in expected)
    return {
        "rows": sum(final.values()),
        "lost": sum((expected - final).values()),
        "duplicated": sum(extra.values()) - strangers,
        "strangers": strangers,
        "vanished": len(set(seen) - set(final)),
    }
