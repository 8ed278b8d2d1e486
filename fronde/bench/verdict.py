"""The verdict, as pure functions over sample records (docs/verdict.md).

A request's speed is its **end-to-end rate**, tokens ÷ ``wall_s``: the wall clock
charges the router for its probe and hand-over prefill, as a user feels them. An item
is **invalid** when an arm lacks an ok sample of ≥ 2 tokens in some repetition,
**looping** when an arm's output scores above :data:`LOOP_SCORE`; neither counts.
Per arm and item the speed is the median over repetitions.

- (a) router ÷ the **best single static arm** (highest Σ tokens ÷ Σ wall): ratio of
  total rates and geometric mean of per-item ratios; also **cross-fitted**, the best
  arm picked on the other repetitions (identical configs measured 3–10 % apart, so
  picking on the same data favours the competitor). Bound ≥ 1.00.
- (b) per domain, router ÷ baseline forced: the interval's lower end. Bound ≥ 0.97.
- (c) router ÷ the **cross-fitted oracle** (each item's best forced mode, picked on
  the other repetitions). Bound ≥ 0.95.

Intervals are percentile bootstraps over items (:data:`RESAMPLES`, seed 0; Efron and
Tibshirani, *An Introduction to the Bootstrap*, 1993, §13.3).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import numpy as np

__all__ = [
    "DRIFT_WARN", "LOOP_SCORE", "Check", "Table", "best_static", "bootstrap", "checks",
    "cross_fitted_static", "first_difference", "geomean", "table", "verdict_of",
]  # fmt: skip

LOOP_SCORE = 0.5
"""Repetition score above which an output is a loop (share of repeated word 4-grams)."""

DRIFT_WARN = 0.10
"""Drift beyond ±10 % between repetitions of one arm is reported as suspect."""

RESAMPLES = 2000
"""Bootstrap resamples per interval."""

BOUNDS = {"a": 1.00, "b": 0.97, "c": 0.95}
"""The verdict's bounds (issue 20)."""


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values; NaN when there are none."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def bootstrap(
    groups: Sequence[Sequence[float]], stat: Callable[[list[float]], float] = geomean
) -> tuple[float, float]:
    """95 % percentile interval of ``stat`` over items resampled with replacement.

    ``groups``: one list of values per item (they move together). NaN, NaN with fewer
    than two items.
    """
    if len(groups) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(groups), size=(RESAMPLES, len(groups)))
    stats = sorted(stat([v for i in row.tolist() for v in groups[int(i)]]) for row in picks)
    return stats[int(0.025 * RESAMPLES)], stats[int(0.975 * RESAMPLES) - 1]


def _rate(s: dict[str, Any]) -> float:
    return s["tokens"] / s["wall_s"]


@dataclass
class Table:
    """One workload's samples, arranged: ``runs[arm][item][rep]`` → sample.

    ``items``: valid item id → domain; ``invalid``: ids left out (a sample failed or is
    missing); ``looping``: id → the arms whose output looped there.
    """

    arms: list[str]
    items: dict[str, str]
    invalid: list[str]
    looping: dict[str, list[str]]
    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = field(
        default_factory=dict[str, dict[str, dict[int, dict[str, Any]]]]
    )

    @property
    def reps(self) -> list[int]:
        """The repetitions present."""
        return sorted({r for by_item in self.runs.values() for s in by_item.values() for r in s})

    def speed(self, arm: str, item: str, reps: Sequence[int] | None = None) -> float:
        """Median end-to-end rate (tok/s) of ``arm`` on ``item`` over ``reps`` (all: None)."""
        runs = self.runs[arm][item]
        return median(_rate(runs[r]) for r in (reps if reps is not None else runs))

    def total(self, arm: str, reps: Sequence[int] | None = None) -> float:
        """Σ tokens ÷ Σ wall seconds of ``arm`` over the valid items and ``reps`` (all: None)."""
        samples = [
            s for i in self.items for r, s in self.runs[arm][i].items() if reps is None or r in reps
        ]
        return sum(s["tokens"] for s in samples) / sum(s["wall_s"] for s in samples)

    def ratios(self, arm: str, other: str) -> list[float]:
        """Per valid item: ``arm``'s speed ÷ ``other``'s."""
        return [self.speed(arm, i) / self.speed(other, i) for i in self.items]

    def drift(self, arm: str) -> float:
        """How far ``arm``'s speed moved between repetitions (1.0: not at all).

        Of each later repetition's total rate ÷ the first's, the one farthest from 1: an
        A/A check that shows a shared machine whose load changed during the run.
        """
        if not self.items:
            return 1.0
        first, *later = self.reps
        ratios = [self.total(arm, [r]) / self.total(arm, [first]) for r in later]
        return max(ratios, key=lambda x: abs(math.log(x)), default=1.0)

    def by_domain(self, arm: str, other: str) -> dict[str, list[float]]:
        """:meth:`ratios`, grouped by the items' domain (in first-seen order)."""
        out: dict[str, list[float]] = defaultdict(list)
        for item, r in zip(self.items, self.ratios(arm, other), strict=True):
            out[self.items[item]].append(r)
        return dict(out)


def table(samples: Sequence[dict[str, Any]], workload: str) -> Table:
    """Arrange the samples of ``workload`` (see :class:`Table` for what is left out)."""
    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    domains: dict[str, str] = {}
    for s in samples:
        if s["workload"] == workload:
            runs[s["arm"]][s["item"]][s["rep"]] = s
            domains.setdefault(s["item"], s["domain"])
    arms = list(runs)
    reps = sorted({r for a in arms for i in runs[a] for r in runs[a][i]})
    invalid: list[str] = []
    looping: dict[str, list[str]] = {}
    items: dict[str, str] = {}
    for item, domain in domains.items():
        cells = [runs[a][item].get(r) for a in arms for r in reps]
        if any(c is None or not c["ok"] or c["tokens"] < 2 for c in cells):
            invalid.append(item)
            continue
        loops = sorted(
            {a for a in arms for c in runs[a][item].values() if c["repetition"] > LOOP_SCORE}
        )
        if loops:
            looping[item] = loops
        else:
            items[item] = domain
    return Table(arms, items, invalid, looping, {a: dict(v) for a, v in runs.items()})


@dataclass(frozen=True)
class Check:
    """One verdict check: what, the measured value with its interval, the bound."""

    name: str
    value: float
    low: float
    high: float
    bound: float

    @property
    def judged(self) -> float:
        """The figure held against the bound: for (b) the interval's lower end, else the value."""
        return self.low if self.name.startswith("(b)") else self.value

    @property
    def measured(self) -> bool:
        """Whether there was enough data (a (b) domain with one valid item has no interval)."""
        return not math.isnan(self.judged)

    @property
    def passed(self) -> bool:
        """Measured and at or above the bound."""
        return self.measured and self.judged >= self.bound


def _statics(t: Table) -> list[str]:
    """The non-routed arms."""
    return [a for a in t.arms if not a.startswith("router")]


def best_static(t: Table) -> str:
    """The non-routed arm with the highest total rate."""
    return max(_statics(t), key=t.total)


def cross_fitted_static(t: Table, router: str) -> tuple[float, list[str]]:
    """Router ÷ the best static arm picked on the other repetitions (module docstring).

    Returns the geometric mean over held-out repetitions of the total-rate ratios and
    the arm picked for each (NaN and [] with fewer than two repetitions).
    """
    reps = t.reps
    if len(reps) < 2 or not t.items:
        return math.nan, []
    statics = _statics(t)
    ratios: list[float] = []
    picks: list[str] = []
    for held in reps:
        rest = [r for r in reps if r != held]
        pick = max(statics, key=lambda a: t.total(a, rest))
        picks.append(pick)
        ratios.append(t.total(router, [held]) / t.total(pick, [held]))
    return geomean(ratios), picks


def _oracle_ratios(t: Table, router: str, reachable: Sequence[str]) -> list[list[float]]:
    reps = t.reps
    per_item: list[list[float]] = []
    for item in t.items:
        ratios: list[float] = []
        for held in reps:
            rest = [r for r in reps if r != held]
            pick = max(reachable, key=lambda a: t.speed(a, item, rest))
            ratios.append(t.speed(router, item, [held]) / t.speed(pick, item, [held]))
        per_item.append(ratios)
    return per_item


def checks(t: Table, router: str, baseline: str, reachable: Sequence[str]) -> list[Check]:
    """The (a), (b) per domain and (c) checks of ``router`` on workload table ``t``.

    ``baseline`` is the plain-decoding arm, ``reachable`` the forced Fronde modes the
    router chooses between. A figure that cannot be measured is NaN (:func:`verdict_of`).
    """
    nan, a, b, c = math.nan, BOUNDS["a"], BOUNDS["b"], BOUNDS["c"]
    if not t.items:
        return [Check(f"(a) {router} ÷ best static", nan, nan, nan, a)]
    best = best_static(t)
    ratios = t.ratios(router, best)
    total = t.total(router) / t.total(best)
    out = [Check(f"(a) {router} ÷ {best}, total", total, nan, nan, a)]
    out.append(Check(f"(a) {router} ÷ {best}, geomean", geomean(ratios), *_ci(ratios), 1.0))
    cross, picks = cross_fitted_static(t, router)
    if picks:
        name = f"(a) {router} ÷ best static, cross-fitted ({'/'.join(picks)})"
        out.append(Check(name, cross, nan, nan, a))
    for domain, rs in t.by_domain(router, baseline).items():
        out.append(Check(f"(b) {router} ÷ {baseline}, {domain}", geomean(rs), *_ci(rs), b))
    if len(t.reps) < 2:
        return [*out, Check(f"(c) {router} ÷ oracle (needs 2 reps)", nan, nan, nan, c)]
    groups = _oracle_ratios(t, router, reachable)
    oracle = geomean([r for g in groups for r in g])
    return [*out, Check(f"(c) {router} ÷ cross-fitted oracle", oracle, *bootstrap(groups), c)]


def _ci(ratios: Sequence[float]) -> tuple[float, float]:
    """The bootstrap interval of the geometric mean of per-item ratios, one value an item."""
    return bootstrap([[r] for r in ratios])


def verdict_of(checks: Sequence[Check]) -> str | None:
    """``PASS``, ``FAIL``, or None when there is no check.

    An unmeasured (b) domain (fewer than two valid items) fails nothing; (a) and (c)
    must be measured to pass.
    """
    if not checks:
        return None
    counted = [c for c in checks if c.measured or not c.name.startswith("(b)")]
    return "PASS" if all(c.passed for c in counted) else "FAIL"


def first_difference(a: str, b: str) -> int | None:
    """Index of the first character where ``a`` and ``b`` differ; None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
