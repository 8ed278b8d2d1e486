"""The progress display of a long benchmark: done of all, elapsed, time left, what runs now.

::

    12/376 requests ━━━━━━━━━━━━━━━━  0:03:12 elapsed  0:09:40 left
    A, rep 1 of 2: starting arm 3 of 9, mod (Fronde, ngram-mod forced)

On a terminal, rich's live display; to a file or pipe, the same two lines whenever
what runs changes, else at most every :data:`PLAIN_EVERY_S`. The time left is rich's
estimate over the whole run, so the server start-ups still to come count in it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Iterable
from contextlib import contextmanager
from types import TracebackType

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from fronde.bench.protocol import RESUMED
from fronde.logging import configure_logging

__all__ = ["PLAIN_EVERY_S", "BenchProgress", "bench_console", "bench_progress"]

PLAIN_EVERY_S = 30.0
"""Off a terminal, the longest time between two printed progress lines, seconds."""

_WHOLE_RUN_S = 7 * 24 * 3600.0
"""rich's speed window: longer than any run, so the rate is the whole run's."""


class _TwoLines(Progress):
    """rich's Progress, the task's description on a line of its own under the bar (80 columns)."""

    def get_renderables(self) -> Iterable[RenderableType]:
        """The bar's row, then what runs now (rich's documented extension point)."""
        yield self.make_tasks_table(self.tasks)
        for task in self.tasks:
            if task.description:
                yield Text(task.description)


class BenchProgress:
    """A benchmark's progress display over ``total`` units (a context manager).

    ``progress(line, n)`` counts ``n`` units ended and prints ``line`` above the bar;
    :meth:`status` says what runs now. Units of a ``line`` ending with
    :data:`~fronde.bench.protocol.RESUMED` leave the total, so the time left is this run's.
    """

    def __init__(
        self,
        console: Console,
        total: int,
        unit: str = "requests",
        get_time: Callable[[], float] = time.monotonic,
    ) -> None:
        """Set up the display on ``console``; ``get_time`` is the clock, s (tests pass one)."""
        self._console = console
        self._unit = unit
        self._resumed = 0
        self._now = get_time
        self._last_print = -math.inf
        self._bar = _TwoLines(
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            BarColumn(bar_width=16),
            TimeElapsedColumn(),
            TextColumn("elapsed"),
            TimeRemainingColumn(),
            TextColumn("left"),
            console=console,
            speed_estimate_period=_WHOLE_RUN_S,
            get_time=get_time,
        )
        self._task = self._bar.add_task("starting", total=total, unit=unit)

    def __enter__(self) -> BenchProgress:
        self._bar.start()
        # A sample at the start: rich's rate then runs from here, start-ups included.
        self._bar.advance(self._task, 0)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.update(self._task, description="done" if kind is None else "stopped")
        self._bar.stop()  # off a terminal, rich prints the last state once here

    @property
    def live(self) -> bool:
        """Whether the display redraws itself (a terminal), rather than printing lines."""
        return self._console.is_terminal and not self._console.is_dumb_terminal

    def __call__(self, line: str, n: int) -> None:
        """Count ``n`` units as ended; print ``line`` (if any) above the bar."""
        if line.endswith(RESUMED):
            self._resumed += n
            task = self._bar.tasks[0]
            unit = f"{self._unit} ({self._resumed} {RESUMED})"
            self._bar.update(self._task, total=(task.total or 0) - n, unit=unit)
            # rich forgets its rate when the total changes: start it again from here. A
            # resumed run skips its done blocks first, so "here" is about its start.
            self._bar.advance(self._task, 0)
        else:
            self._bar.advance(self._task, n)
        if line:
            self._console.print(line, markup=False, highlight=False)
        self._plain()

    def status(self, what: str) -> None:
        """Say what runs now (e.g. which arm's servers are starting); shown under the bar."""
        self._bar.update(self._task, description=what)
        self._plain(force=True)

    def _plain(self, force: bool = False) -> None:
        """Off a terminal: print the bar's two lines, on a change or every PLAIN_EVERY_S."""
        now = self._now()
        if self.live or (not force and now - self._last_print < PLAIN_EVERY_S):
            return
        self._last_print = now
        for renderable in self._bar.get_renderables():
            self._console.print(renderable, highlight=False)


def bench_console() -> Console:
    """A console for benchmark tables: 80 columns when writing to a file or pipe."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=80)


@contextmanager
def bench_progress(
    console: Console, total: int, unit: str = "requests"
) -> Generator[BenchProgress]:
    """:class:`BenchProgress` over ``total`` units; the benchmark logs at warning and above."""
    configure_logging(level="warning")
    with BenchProgress(console, total, unit) as progress:
        yield progress
