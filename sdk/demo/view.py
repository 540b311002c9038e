"""What the demo shows: a live view while it runs, and the final table (rich).

On a terminal the view redraws in place: the batches Spark has committed, the current run, the
events so far (crashes, lost COMMIT replies, restarts) and both tables as they fill. Elsewhere
(CI logs, a pipe) it prints each event as a line instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

__all__ = ["Counts", "Outcome", "Snapshot", "View", "final_table"]


@dataclass
class Counts:
    """What one table holds right now."""

    rows: int = 0
    duplicates: int = 0


@dataclass
class Snapshot:
    """The state the live view draws."""

    run: int = 0
    batches_done: int = 0
    expected_rows: int = 0
    plain: Counts = field(default_factory=Counts)
    eosink: Counts = field(default_factory=Counts)


@dataclass
class Outcome:
    """One writer's result at the end, against what was sent."""

    label: str
    expected: int
    found: int
    duplicates: int
    lost: int
    accounts: int
    accounts_right: int
    lost_replies: int
    how_resolved: str
    replays_skipped: str

    @property
    def exact(self) -> bool:
        return self.duplicates == 0 and self.lost == 0 and self.accounts_right == self.accounts


class View:
    """The live view (a context manager); :meth:`event` and :meth:`update` may be called at any time."""

    def __init__(self, console: Console, title: str, batches: int, *, max_events: int = 12) -> None:
        self.console = console
        self.title = title
        self.batches = batches
        self.max_events = max_events
        self.events: list[str] = []
        self.snapshot = Snapshot()
        self.started = time.monotonic()
        self.live = console.is_terminal
        self._live: Live | None = None
        self._printed_batches = -1

    def __enter__(self) -> View:
        if self.live:
            self._live = Live(self._render(), console=self.console, refresh_per_second=8, transient=False)
            self._live.__enter__()
        else:
            self.console.print(self.title)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(et, ev, tb)
            self._live = None

    def _clock(self) -> str:
        s = int(time.monotonic() - self.started)
        return f"{s // 60:02d}:{s % 60:02d}"

    def event(self, text: str) -> None:
        line = f"{self._clock()}  {text}"
        self.events.append(line)
        if self._live is not None:
            self._live.update(self._render())
        else:
            self.console.print(line, highlight=False)

    def update(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if self._live is not None:
            self._live.update(self._render())
        elif snapshot.batches_done != self._printed_batches:
            self._printed_batches = snapshot.batches_done
            s = snapshot
            self.console.print(
                f"{self._clock()}  Spark committed {s.batches_done}/{self.batches} batches; "
                f"plain {s.plain.rows} rows ({s.plain.duplicates} duplicated), "
                f"eosink {s.eosink.rows} rows ({s.eosink.duplicates} duplicated)",
                highlight=False,
            )

    def _render(self) -> Any:
        s = self.snapshot
        head = Table.grid(padding=(0, 2))
        head.add_row(
            Text(f"run {s.run}", style="bold"),
            ProgressBar(total=self.batches, completed=s.batches_done, width=40),
            Text(f"{s.batches_done}/{self.batches} batches committed by Spark   {self._clock()}"),
        )
        tables = Table(box=None, padding=(0, 2))
        tables.add_column("table")
        for name in ("payments so far", "rows", "duplicated"):
            tables.add_column(name, justify="right")
        for label, counts in (("payments_plain", s.plain), ("payments_eosink", s.eosink)):
            style = "red" if counts.duplicates else ""
            tables.add_row(label, str(s.expected_rows), str(counts.rows), Text(str(counts.duplicates), style=style))
        events = Text("\n".join(self.events[-self.max_events :]) or "starting ...", overflow="fold")
        return Panel(
            Group(head, Text(""), tables, Text(""), Panel(events, title="events", border_style="dim")),
            title=self.title,
        )


def final_table(plain: Outcome, eos: Outcome, *, batches: int, crashes: int, title: str = "result") -> Table:
    """Plain vs eosink, row by row."""
    table = Table(title=title, show_lines=False)
    table.add_column("")
    table.add_column(plain.label, justify="right")
    table.add_column(eos.label, justify="right")

    def mark(value: int, bad: bool) -> Text:
        return Text(str(value), style="bold red" if bad else "bold green")

    table.add_row("micro-batches", str(batches), str(batches))
    table.add_row("driver crashes (SIGKILL, restart from checkpoint)", str(crashes), str(crashes))
    table.add_row("COMMIT replies lost", str(plain.lost_replies), str(eos.lost_replies))
    table.add_row("  ... and what happened", plain.how_resolved, eos.how_resolved)
    table.add_row("replayed batches skipped", plain.replays_skipped, eos.replays_skipped)
    table.add_row("payments sent", str(plain.expected), str(eos.expected))
    table.add_row("payments found", str(plain.found), str(eos.found))
    table.add_row("duplicated", mark(plain.duplicates, plain.duplicates > 0), mark(eos.duplicates, eos.duplicates > 0))
    table.add_row("lost", mark(plain.lost, plain.lost > 0), mark(eos.lost, eos.lost > 0))
    table.add_row(
        "account balances right",
        Text(f"{plain.accounts_right}/{plain.accounts}", style="bold red" if not plain.exact else "bold green"),
        Text(f"{eos.accounts_right}/{eos.accounts}", style="bold red" if not eos.exact else "bold green"),
    )
    return table
