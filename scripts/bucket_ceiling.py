"""What routing by bucket could give at c = 1, read off a load run's static arms.

The router's predicted rule sends a request to the mode its **bucket** predicts fastest
(:func:`fronde.evidence.counterfactual.bucket_of`: the static class and the prompt's
self-overlap band). A book that learned each bucket's real best mode perfectly would
choose, for each bucket, the mode that served its items fastest, and would then meet
new blocks of the same items. This script reads what that gives off the static arms of
a ``fronde bench load`` folder, where every item ran on every single server at c = 1
(an estimate, not a bound: one held-out repetition of the same items):

- for each bucket scheme, each bucket's mode is chosen on one repetition (least Σ
  end-to-end time over the bucket's items; baseline unless another mode beats it by
  more than ``router.predict_band``, 3 %) and applied to the other repetition: the
  held-out ratio is the best static arm's Σ time on that repetition ÷ the routed Σ
  time (above 1: faster than the best single server, as a user would have picked it
  after the fact). The floor is baseline here, where the router's may be another mode
  (the curves' floor);
- ``per item``: each item sent to the server that was fastest for it on the one
  repetition, read on the other (what knowing every prompt's best server from an
  earlier run would give);
- ``oracle``: each item on its fastest server of the same repetition (in-sample: the
  least of four noisy times, so above what any choice made beforehand can get).

Schemes: ``as served`` (the router's buckets), ``+ length`` (the same, split at 400
and 900 characters of request text), ``edit at N`` (the EDIT class with fenced blocks
of N characters or more instead of 800).

Loops are left out as the page leaves them out (answers that repeat themselves in any
arm). Usage::

    .venv/bin/python scripts/bucket_ceiling.py results/load-gpu-h200-cpu-gemma-270m-20261204-c1f

The prompt form (completion for gemma's base model, chat for SmolLM2) is read from the
run's title (``Load: <profile>, ...``) through the profile.
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fronde.bench.load_mix import agent_mix
from fronde.bench.load_report import recorded_run
from fronde.bench.load_rows import level_c, looping_items
from fronde.bench.load_verdict import tagged_samples
from fronde.bench.store import Store
from fronde.bench.workloads import Form
from fronde.config import default_models_dir
from fronde.evidence.bucket import bucket_of, self_overlap
from fronde.router.classify import classify, request_text
from fronde.runtime.models import load_profile

BAND = 0.03
"""``router.predict_band``: another mode replaces baseline only beyond it."""

Times = dict[tuple[str, str, int], float]


def _times(
    samples: Sequence[dict[str, Any]], loops: Sequence[str], arms: Mapping[str, str]
) -> Times:
    """(item, arm, repetition) → end-to-end seconds at c = 1 (median of repeats).

    ``arms``: Fronde mode → the static arm that runs it (the run's calibration).
    """
    got: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    left = set(loops)
    for s in samples:
        if level_c(s["level"]) != 1 or not s["ok"] or s["item"] in left:
            continue
        if s["arm"] in arms.values():
            got[(s["item"], s["arm"], int(s["rep"]))].append(float(s["wall_s"]))
    return {k: statistics.median(v) for k, v in got.items()}


def _schemes(form: Form) -> dict[str, Callable[[str], str]]:
    """Scheme name → item id → bucket key."""
    items = {i.id: i for i in agent_mix().items}

    def text(item: str) -> tuple[dict[str, Any], str]:
        body = items[item].body(form, 64)
        return body, request_text(body)

    def served(item: str, edit_chars: int = 800) -> str:
        body, txt = text(item)
        return bucket_of(str(classify(body, edit_block_chars=edit_chars)), self_overlap(txt))

    def length(item: str) -> str:
        n = len(text(item)[1])
        return served(item) + ("|xl" if n >= 900 else "|long" if n >= 400 else "|short")

    out: dict[str, Callable[[str], str]] = {"as served": served, "+ length": length}
    for chars in (400, 200, 100):
        out[f"edit at {chars}"] = lambda item, c=chars: served(item, c)
    # Each item's key is asked for once a repetition and direction: computed once.
    return {name: functools.cache(key) for name, key in out.items()}


def _choose(
    t: Times, items: Sequence[str], key: Callable[[str], str], rep: int, arms: Mapping[str, str]
) -> dict[str, str]:
    """Bucket → the mode whose arm (``arms``) served its items in least Σ time on ``rep``."""
    by: dict[str, list[str]] = defaultdict(list)
    for i in items:
        by[key(i)].append(i)
    pick: dict[str, str] = {}
    for bucket, its in by.items():
        total = {m: sum(t[(i, a, rep)] for i in its) for m, a in arms.items()}
        best = min(total, key=lambda m: total[m])
        pick[bucket] = "baseline" if total["baseline"] <= total[best] * (1 + BAND) else best
    return pick


def report(folder: Path) -> list[str]:
    """The ceiling lines of one load folder (every scheme, both directions)."""
    store = Store(folder / "records.jsonl")
    samples = tagged_samples(store)
    run, calibration = recorded_run(folder, store)
    arms = {str(m): a for m, a in calibration.items()}
    title = str(run.get("title", ""))
    found = re.match(r"Load: ([\w.-]+),", title)
    if found is None:
        return [f"{folder}: no profile in the run's title ({title!r})"]
    form = load_profile(default_models_dir(), found.group(1)).prompt_form
    t = _times(samples, looping_items(samples), arms)
    reps = sorted({r for _, _, r in t})
    items = sorted({i for i, _, _ in t if all((i, a, r) in t for a in arms.values() for r in reps)})
    if len(reps) < 2 or not items:
        return [f"{folder}: needs two repetitions of every single-server arm at c = 1"]
    lines = [f"{folder.name}: {len(items)} items at c = 1, {form} form"]
    static = {m: {r: sum(t[(i, a, r)] for i in items) for r in reps} for m, a in arms.items()}
    for name, key in _schemes(form).items():
        held: list[str] = []
        for train, test in ((reps[0], reps[1]), (reps[1], reps[0])):
            pick = _choose(t, items, key, train, arms)
            routed = sum(t[(i, arms[pick.get(key(i), "baseline")], test)] for i in items)
            best = min(v[test] for v in static.values())
            chosen = sorted(set(pick.values()))
            held.append(f"{best / routed:.3f}× ({len(pick)} buckets: {', '.join(chosen)})")
        lines.append(f"  {name}: held out {'; '.join(held)}")
    per_item: list[str] = []
    for train, test in ((reps[0], reps[1]), (reps[1], reps[0])):
        fastest = {i: min(arms.values(), key=lambda a, i=i: t[(i, a, train)]) for i in items}
        routed = sum(t[(i, fastest[i], test)] for i in items)
        per_item.append(f"{min(v[test] for v in static.values()) / routed:.3f}×")
    lines.append(f"  per item: held out {'; '.join(per_item)}")
    for r in reps:
        oracle = sum(min(t[(i, a, r)] for a in arms.values()) for i in items)
        best = min(v[r] for v in static.values())
        lines.append(f"  oracle, repetition {r}: {best / oracle:.3f}× the best static arm")
    return lines


def main() -> None:
    """Print the ceiling of each folder given."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="fronde bench load folders")
    for folder in parser.parse_args().folders:
        print("\n".join(report(folder)))


if __name__ == "__main__":
    main()
