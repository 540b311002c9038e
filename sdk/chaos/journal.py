"""The journal of a chaos run: every finished schedule's result, one JSON file each.

A long run that was interrupted resumes from it (``eosink chaos --resume``): a schedule whose
result is already here, for the same seed, strategy, workload and faults, is not run again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from eosink.chaos.results import ScheduleResult
from eosink.chaos.schedule import Schedule

__all__ = ["Journal"]


class Journal:
    """The results of finished schedules under ``root`` (created if missing)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root

    def path(self, schedule: Schedule) -> Path:
        replication = f"-{schedule.replication}" if schedule.replication else ""
        return self.root / f"{schedule.mode}{replication}-{schedule.strategy}-{schedule.seed}.json"

    def save(self, schedule: Schedule, result: ScheduleResult) -> None:
        self.path(schedule).write_text(json.dumps(result.to_json(), default=str) + "\n")

    def finished(self, planned: Sequence[Schedule]) -> dict[int, ScheduleResult]:
        """The results here of ``planned`` schedules, by index in ``planned``; another shape's are ignored."""
        found: dict[int, ScheduleResult] = {}
        for i, schedule in enumerate(planned):
            path = self.path(schedule)
            if path.exists():
                saved = json.loads(path.read_text())
                if saved.get("schedule") == schedule.to_json():
                    found[i] = ScheduleResult.from_json(saved)
        return found
