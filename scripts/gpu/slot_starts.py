"""How long each llama-server task waited between its slot's launch and its prompt's start.

b11434 launches a task on a slot in ``process_single_task`` (the log's ``launch_slot_``
line) and starts its prompt at the next ``update_slots`` (``update_prompt_start``); the
task's ``total time`` (``print_timing``) runs from there to its last token, and
``release`` follows within microseconds. So ``release − launch − total`` is the time a
task waited between its launch and its prompt's start, plus the few microseconds after its
end. With ``--cache-idle-slots`` on (b11434's default), that wait holds the saving of every
idle slot to the prompt cache (``prompt_save`` for each slot that is not processing,
``tools/server/server-context.cpp``). This reads the ``-lv`` 3 (info) log of a
llama-server and prints, per log, the median wait grouped by how many idle slots held a
prompt (had been used) when the task launched, and the median time from the slot's
``selected slot`` line to its launch (``get_available_slot``'s own prompt-cache update).

    python scripts/gpu/slot_starts.py <folder>/logs/*/*.log <folder>/logs/fronde-backends/*/*.log

Logs may be gzipped (``.gz``).
"""

from __future__ import annotations

import gzip
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

_SLOT = re.compile(r"id +(\d+) \| task (-?\d+)")
_TOTAL = re.compile(r"total time = +([\d.]+) ms")


def stamp_s(token: str) -> float:
    """A b11434 log line's time stamp (``M.SS.mmm.uuu`` since the server started), seconds.

    Raises:
        ValueError: ``token`` is not such a stamp.
    """
    minutes, seconds, ms, us = token.split(".")
    return int(minutes) * 60 + int(seconds) + int(ms) / 1e3 + int(us) / 1e6


def waits(lines: list[str]) -> tuple[list[tuple[int, float]], list[float]]:
    """(idle used slots at launch, launch→prompt wait ms) per task, and select→launch ms."""
    used: set[int] = set()
    busy: set[int] = set()
    launched: dict[int, tuple[float, int]] = {}
    totals: dict[int, float] = {}
    selected: float | None = None
    out: list[tuple[int, float]] = []
    picks: list[float] = []
    for line in lines:
        m = _SLOT.search(line)
        if m is None:
            continue
        slot, task = int(m.group(1)), int(m.group(2))
        t = stamp_s(line.split()[0])
        if "selected slot" in line:
            selected = t
        elif "launch_slot_" in line:
            if selected is not None:
                picks.append((t - selected) * 1000)
                selected = None
            launched[task] = (t, len(used - busy - {slot}))
            busy.add(slot)
            used.add(slot)
        elif "total time =" in line and (tm := _TOTAL.search(line)):
            totals[task] = float(tm.group(1))
        elif " release: " in line:
            busy.discard(slot)
            if task in launched and task in totals:
                t0, idle = launched.pop(task)
                out.append((idle, (t - t0) * 1000 - totals.pop(task)))
    return out, picks


def read_lines(path: Path) -> list[str]:
    """The lines of a log, gzipped or not."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", errors="replace") as fh:
            return fh.read().splitlines()
    return path.read_text(errors="replace").splitlines()


def report(path: Path) -> str:
    """One line for a log: tasks, slots used, the median wait by idle used slots (groups of 8)."""
    rows, picks = waits(read_lines(path))
    if not rows:
        return f"{path}: no task"
    groups: dict[int, list[float]] = defaultdict(list)
    for idle, wait in rows:
        groups[idle // 8 * 8].append(wait)
    by = " ".join(
        f"{k}-{k + 7}: {statistics.median(v):.1f} ms ({len(v)})" for k, v in sorted(groups.items())
    )
    every = statistics.median(w for _, w in rows)
    pick = f"{statistics.median(picks):.1f}" if picks else "-"
    return (
        f"{path}: {len(rows)} tasks, launch→prompt {every:.1f} ms; by idle used slots {by}; "
        f"select→launch {pick} ms"
    )


def main() -> None:
    """Print :func:`report` for each log named on the command line."""
    for name in sys.argv[1:]:
        print(report(Path(name)))


if __name__ == "__main__":
    main()
