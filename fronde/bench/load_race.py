"""What racing two servers would give one request at a time (c = 1), read off the static arms.

A **race** sends a request to two servers at once and keeps the answer that ends first,
whole (the text is still one mode's). :func:`race_lines` reads, per repetition, the
aggregate a race of two static arms would have had against the best single arm over
the same items; :data:`RACE_ABOUT` says on the page what bounds that reading (servers
that do not slow each other, which one H200 measured false; in-sample). ``every
server`` is the race of all of them (the per-item oracle).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from fronde.bench.load import CONTROLS, ROUTED
from fronde.bench.load_rows import level_c

__all__ = ["RACE_ABOUT", "RACE_HEAD", "race_lines"]

RACE_HEAD = "## Racing two servers at c = 1 (read off the static arms, in-sample)"
"""The page's heading over :func:`~fronde.bench.load_race.race_lines`."""

RACE_ABOUT = (
    "Each item sent to two servers at once, the answer that ends first kept (the text is "
    "that server's, whole): Σ tokens ÷ Σ time of whichever static arm finished the item "
    "first, against the best single arm over the same items. It assumes the two servers "
    "do not slow each other, as with a device per server, and is in-sample. On one H200 "
    "it was measured false: a real race of plain and cascade (gemma, c = 1, "
    "`results/hop-gpu-h200-cpu-gemma-270m-20261204-race`) read 0.50× the better server "
    "alone. Not something Fronde does. Its tok/s are Σ tokens ÷ Σ request time over the "
    "items, as one client waits for them, not the table's steady-window tok/s (which "
    "count the gaps between requests too)."
)
"""What the race lines are, under :data:`RACE_HEAD` on the page."""

_NOT_ONE_SERVER = {*CONTROLS, *ROUTED}


def _rate(times: dict[str, tuple[int, float]], items: Sequence[str]) -> float:
    """Σ tokens ÷ Σ seconds over ``items`` of one arm (item → (tokens, wall_s))."""
    wall = sum(times[i][1] for i in items)
    return sum(times[i][0] for i in items) / wall if wall > 0 else 0.0


def _raced(arms: Sequence[dict[str, tuple[int, float]]], items: Sequence[str]) -> float:
    """Σ tokens ÷ Σ seconds when each item is kept from the arm that finished it first."""
    firsts = [min((a[i] for a in arms), key=lambda tw: tw[1]) for i in items]
    wall = sum(w for _, w in firsts)
    return sum(n for n, _ in firsts) / wall if wall > 0 else 0.0


def race_lines(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> list[str]:
    """The page's lines on racing at c = 1, one per (session, repetition); [] without c = 1.

    Args:
        samples: a load run's sample records (``arm``, ``level``, ``rep``, ``item``,
            ``ok``, ``tokens``, ``wall_s``; ``session`` when tagged).
        loops: item ids left out (:func:`~fronde.bench.load.looping_items`).

    Returns:
        Per repetition with two or more single-server arms: the items every such arm
        answered, the best single arm's tok/s, each pair's race and the race of every
        server as tok/s and ratio to that best, and each router arm on the same items.
    """
    left = set(loops)
    blocks: dict[tuple[str, int], dict[str, dict[str, tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for s in samples:
        if level_c(s["level"]) != 1 or not s["ok"] or s["item"] in left:
            continue
        key = (str(s.get("session", "")), int(s["rep"]))
        blocks[key][s["arm"]][s["item"]] = (int(s["tokens"] or 0), float(s["wall_s"]))
    lines: list[str] = []
    for (session, rep), arms in blocks.items():
        single = sorted(a for a in arms if a not in _NOT_ONE_SERVER)
        if len(single) < 2:
            continue
        common: set[str] = set(arms[single[0]])
        for a in single[1:]:
            common &= set(arms[a])
        items = sorted(common)
        if not items:
            continue
        rates = {a: _rate(arms[a], items) for a in single}
        best = max(single, key=lambda a: rates[a])
        top = rates[best]
        if top <= 0:
            continue
        races = {f"{a}+{b}": _raced([arms[a], arms[b]], items) for a, b in combinations(single, 2)}
        races["every server"] = _raced([arms[a] for a in single], items)
        shown = sorted(races.items(), key=lambda kv: -kv[1])
        parts = [f"{name} {r:.0f} ({r / top:.2f}×)" for name, r in shown]
        routers = [
            f"{a} {_rate(arms[a], items) / top:.2f}×"
            for a in sorted(arms)
            if a in ROUTED and set(items) <= set(arms[a])
        ]
        where = f"session {session}, " if session else ""
        head = f"- {where}rep {rep}, {len(items)} items: best single {best} {top:.0f} tok/s; "
        tail = f"; on the same items {', '.join(routers)}" if routers else ""
        lines.append(head + "race " + ", ".join(parts) + tail)
    return lines
