"""What racing two servers would give one request at a time (c = 1), read off the static arms.

At one request in flight a GPU decodes far below what it can, and a router that picks
one mode per prompt can at best pick the faster server of each prompt. A **race** sends
the request to two servers at once and keeps the answer that ends first (a hedged
request): the client gets that server's whole answer, so the text is still one mode's.
The load benchmark's static arms give each item's time on every server alone; this
reads, per repetition, the aggregate a race of two of them would have had:
Σ tokens ÷ Σ end-to-end time of whichever arm finished the item first, against the
best single arm over the same items (each arm's own Σ tokens ÷ Σ time, loops left out).

Two readings bound it. It assumes the two servers do not slow each other, which was
measured false on one H200: racing plain (``--backend-sampling``) against cascade (gemma,
c = 1, ``scripts/gpu/hop_probe.py --partner cascade``,
``results/hop-gpu-h200-cpu-gemma-270m-20261204-race``) read 0.50× [0.49, 0.51] the
better server alone, the kept answers decoding at a median 240 tok/s against 739 and
544 for each server alone, as the serving probe of 2026-12-03 had found two processes
taking turns where the GPU is the limit (``plain2 ÷ plain`` at c = 1 never tested it:
one of its servers is idle). So this reads what a race would give with a device per
server. And it is in-sample: a race keeps the faster of two noisy times, which a real
race does too, but here the same blocks also chose the best single arm. ``every
server`` is the race of all of them (the per-item oracle).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from fronde.bench.load import CONTROLS, ROUTERS
from fronde.bench.load_rows import level_c

__all__ = ["race_lines"]

_NOT_ONE_SERVER = {*CONTROLS, *ROUTERS.values()}


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
            if a in ROUTERS.values() and set(items) <= set(arms[a])
        ]
        where = f"session {session}, " if session else ""
        head = f"- {where}rep {rep}, {len(items)} items: best single {best} {top:.0f} tok/s; "
        tail = f"; on the same items {', '.join(routers)}" if routers else ""
        lines.append(head + "race " + ", ".join(parts) + tail)
    return lines
