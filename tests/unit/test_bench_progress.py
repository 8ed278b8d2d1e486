"""The benchmarks' progress display: what runs now, done of all, elapsed and time left."""

from __future__ import annotations

import io

from rich.console import Console

from fronde.bench.progress import PLAIN_EVERY_S, BenchProgress
from fronde.bench.protocol import RESUMED


class Clock:
    """A clock the test moves by hand, seconds."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def piped() -> Console:
    """A console writing to a file, as in a CI log or `| tee`: no live display."""
    return Console(file=io.StringIO(), width=80, force_terminal=False, record=True)


def test_off_a_terminal_it_says_what_runs_then_counts_elapsed_and_time_left() -> None:
    console, clock = piped(), Clock()
    with BenchProgress(console, 40, get_time=clock) as progress:
        assert not progress.live
        progress.status("first-encounter, rep 1 of 2: starting arm 3 of 9, mod")
        clock.t = 300.0  # five minutes of start-up, then the first 10 requests
        progress("", 10)
    text = console.export_text()
    lines = text.splitlines()
    # The status is printed as soon as it changes, under the bar, before any request.
    assert lines[0].split() == ["0/40", "requests", "0:00:00", "elapsed", "-:--:--", "left"]
    assert lines[1] == "first-encounter, rep 1 of 2: starting arm 3 of 9, mod"
    # 10 requests in 300 s, start-up included: the 30 left take 900 s more. rich's
    # default window (30 s) would have forgotten the start and shown no estimate.
    assert lines[2].split()[:2] == ["10/40", "requests"]
    assert lines[2].split()[-4:] == ["0:05:00", "elapsed", "0:15:00", "left"]
    assert lines[-1] == "done"
    assert max(len(line) for line in lines) <= 80


def test_off_a_terminal_progress_is_printed_at_most_every_plain_every_s() -> None:
    console, clock = piped(), Clock()
    with BenchProgress(console, 100, get_time=clock) as progress:
        progress.status("sending")
        for _ in range(10):
            clock.t += PLAIN_EVERY_S / 4
            progress("", 1)
    rows = [line for line in console.export_text().splitlines() if "requests" in line]
    # The status line, then one row every fourth request (10 requests, 2.5 periods),
    # then the last state once at the end.
    assert [r.split()[0] for r in rows] == ["0/100", "4/100", "8/100", "10/100"]


def test_block_lines_are_printed_and_resumed_requests_leave_the_total() -> None:
    console, clock = piped(), Clock()
    with BenchProgress(console, 30, get_time=clock) as progress:
        progress(f"first-encounter|base|0: {RESUMED}", 10)
        clock.t = 100.0
        progress("", 5)
        progress("first-encounter|mod|0: 100 s", 0)
    text = console.export_text()
    assert "first-encounter|base|0: done in an earlier run" in text
    assert "first-encounter|mod|0: 100 s" in text
    # 10 of the 30 were done before: 5 of the 20 left, and the rate is this run's
    # (5 in 100 s: 300 s for the other 15), not 15 in 100 s.
    last = [line for line in text.splitlines() if "requests" in line][-1]
    assert last.split()[:2] == ["5/20", "requests"]
    assert "(10 done in an earlier run)" in last
    assert last.split()[-2:] == ["0:05:00", "left"]


def test_on_a_terminal_the_display_is_live_and_prints_only_block_lines() -> None:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True)
    with BenchProgress(console, 4) as progress:
        assert progress.live
        progress.status("starting arm 1 of 1, base")
        progress("w|base|0: 3 s", 4)
    text = out.getvalue()
    assert "w|base|0: 3 s" in text
    assert "4/4" in text and "elapsed" in text
