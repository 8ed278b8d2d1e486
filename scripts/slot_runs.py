"""How contiguous Fronde kept the busy slots in a load run, from its records' slot ids.

llama.cpp b11434 runs one micro-batch per run of consecutive busy sequence ids
(``docs/slot-placement.md``), so Fronde pins each request to a slot next to the busy
ones and records the slot in each answer's ``x-fronde-slot`` header (``route.slot`` in
``records.jsonl``). This reads a load folder's records and prints, per Fronde arm, c
and repetition, sampled every 10 ms of the window: the mean number of busy slots, the
mean number of runs of consecutive busy ids (1.00: one batch), the share of the time
with more than one run, and the mean highest busy id. A slot counts as busy from a
request's send to its last byte at the client (``t0`` to ``t0 + wall_s``), so the
figures approximate the server's own occupancy: a slot the server frees a little later
or earlier moves them slightly.

``--replay`` sends each block's requests again, at their recorded times, through
Fronde's rule for the next slot (:func:`~fronde.backends.slots.next_slot`) and through
the rule before it (``edge-first``: on a tie the lowest id, the edges before a gap), the
first pinned request on the slot it had (the server had placed the block's first request
beside it), requests the server placed itself left out, each slot let go at its
request's end: the same figures for each rule, and the recorded ones beside them, which
the ``edge-first`` replay of an ``edge-first`` run should match.

Usage: ``python scripts/slot_runs.py results/<load folder>/records.jsonl.gz [--replay]``.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from statistics import mean
from typing import Any

from fronde.backends.slots import next_slot

STEP_S = 0.01
"""The sampling step through the window, s."""


def runs(busy: list[int]) -> int:
    """Runs of consecutive ids in ``busy`` (sorted, distinct); 0 when empty."""
    return (1 + sum(1 for a, b in itertools.pairwise(busy) if b != a + 1)) if busy else 0


def block_figures(samples: list[dict[str, Any]], window: tuple[float, float]) -> dict[str, float]:
    """Mean busy slots, mean runs, share of time with more than one run, mean top id.

    ``samples``: one block's records with a slot; ``window``: its [start, end), s from
    the block's start. Raises ValueError when no slot is busy at any sampled time.
    """
    spans = [(r["t0"], int(r["route"]["slot"]), r["t0"] + r["wall_s"]) for r in samples]
    seen: list[tuple[int, int, int]] = []
    t = window[0]
    while t < window[1]:
        busy = sorted({s for a, s, b in spans if a <= t < b})
        if busy:
            seen.append((len(busy), runs(busy), busy[-1]))
        t += STEP_S
    if not seen:
        raise ValueError("no busy slot in the window")
    return {
        "busy": mean(n for n, _, _ in seen),
        "runs": mean(k for _, k, _ in seen),
        "split": sum(1 for _, k, _ in seen if k > 1) / len(seen),
        "top": mean(top for _, _, top in seen),
    }


def edge_first(held: frozenset[int], n: int) -> int | None:
    """The rule before :func:`next_slot`: fewest runs, then the lowest id (edges first)."""
    free = [i for i in range(n) if i not in held]
    return max(free, key=lambda i: ((i - 1 in held) + (i + 1 in held), -i)) if free else None


def replayed(
    samples: list[dict[str, Any]], rule: Callable[[frozenset[int], int], int | None], n: int
) -> list[dict[str, Any]]:
    """``samples`` (one block's pinned requests) with each slot chosen again by ``rule``.

    In the order the requests were sent, each ending one let go first; the first keeps
    its recorded slot. ``n``: the server's slots.
    """
    order = sorted(samples, key=lambda r: r["t0"])
    held: dict[int, float] = {}  # slot → when its request ends
    out: list[dict[str, Any]] = []
    for k, r in enumerate(order):
        held = {s: end for s, end in held.items() if end > r["t0"]}
        slot = int(r["route"]["slot"]) if k == 0 else rule(frozenset(held), n)
        if slot is None:
            continue  # every slot held: the server would have queued it
        held[slot] = r["t0"] + r["wall_s"]
        out.append(r | {"route": {**r["route"], "slot": str(slot)}})
    return out


def main() -> None:
    """Print the table for the records file named on the command line."""
    parser = argparse.ArgumentParser(description="How contiguous Fronde kept the busy slots.")
    parser.add_argument("records", type=Path, help="a load folder's records.jsonl.gz")
    parser.add_argument("--replay", action="store_true", help="each rule again, beside")
    parser.add_argument("--slots", type=int, default=32, help="the servers' slots (--replay)")
    parser.add_argument("--warm-up", action="store_true", help="from the block's start")
    parser.add_argument(
        "--span", type=float, nargs=2, default=None, metavar=("FROM", "TO"),
        help="only these seconds of each block (its window: without)",
    )  # fmt: skip
    args = parser.parse_args()
    blocks: defaultdict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    windows: dict[tuple[str, str, int], tuple[float, float]] = {}
    path: Path = args.records
    with gzip.open(path, "rt") as f:
        for line in f:
            r: dict[str, Any] = json.loads(line)
            route: dict[str, Any] = r.get("route") or {}
            if r.get("type") != "sample" or not r.get("ok") or route.get("slot") is None:
                continue
            key = (r["arm"], r["level"] or "c1", r["rep"])
            blocks[key].append(r)
            start, end = r.get("win") or (0.0, 1e9)
            windows[key] = (0.0 if args.warm_up else float(start), float(end))
            if args.span is not None:
                windows[key] = (args.span[0], args.span[1])
    rules = {"recorded": None} | (
        {"edge-first": edge_first, "next_slot": next_slot} if args.replay else {}
    )
    print("| arm | c | rep | slots | busy slots | runs | > 1 run | top id |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for key in sorted(blocks):
        arm, c, rep = key
        for name, rule in rules.items():
            samples = blocks[key] if rule is None else replayed(blocks[key], rule, args.slots)
            fig = block_figures(samples, windows[key])
            print(
                f"| {arm} | {c} | {rep} | {name} | {fig['busy']:.1f} | {fig['runs']:.2f} "
                f"| {fig['split']:.0%} | {fig['top']:.1f} |"
            )


if __name__ == "__main__":
    main()
