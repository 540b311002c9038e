"""A benchmark job: everything one driver process needs for one run, written as JSON beside its checkpoint.

The parent (:func:`eosink.bench.runner.run_job`) writes it; the driver (``python -m
eosink.bench.runner JOB``) reads it back and runs the throughput or the latency run it describes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eosink.bench.runs import RunSpec

__all__ = ["Job"]


@dataclass
class Job:
    """Everything a driver process needs for one run (written as JSON next to its checkpoint)."""

    kind: str  # "throughput" | "latency" | "rss"
    sink: str
    spec: RunSpec
    ns: str
    root: str
    master: str = "local[2]"
    participants: int = 2
    data: str = ""
    rows: int = 0
    rate: int = 0
    duration_s: float = 0.0
    warmup_s: float = 0.0
    trigger_ms: int = 200
    poll_ms: int = 10
    warm_on_data: bool = False
    """Throughput: warm up by writing the whole data set the run's own way (a stream's JIT-compiled steady
    state) instead of a few rows (:func:`~eosink.bench.session.warm_up`)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = dict(self.__dict__)
        body["spec"] = self.spec.to_json()
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Job:
        body = dict(body)
        body["spec"] = RunSpec.from_json(body["spec"])
        return cls(**body)
