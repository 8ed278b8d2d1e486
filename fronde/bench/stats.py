"""The battery's statistics, as pure functions over numbers and records.

- **Bracket** (the original FRONDE protocol): each config × prompt is measured
  between two baseline references, each the median over ``reps`` runs. Their
  relative difference is the drift; above :data:`DRIFT_LIMIT` the cell is rerun
  once, then marked invalid. The config's ratio is its median over the mean of the
  two references, so a slow drift hits both sides alike.
- **Repetition score**: the share of a text's word 4-grams that repeat an earlier
  one (0: none repeats; near 1: a loop). The base gemma model often degenerates
  into loops, which inflates acceptance; above :data:`DEGENERATE_SCORE` an output is
  flagged degenerate.
- **Oracle**: per prompt, the best static config's decode tok/s.
- **Verdict**: router ≥ 0.98 × baseline on every prompt; router ≥ 0.90 × the best
  static config on code, math and JSON (the original FRONDE invariant); geometric
  mean of router ÷ oracle ≥ 0.95 (Fronde's own).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEGENERATE_SCORE",
    "DRIFT_LIMIT",
    "Bracket",
    "Check",
    "bracket",
    "first_difference",
    "geomean",
    "repetition_score",
    "verdict",
]

DRIFT_LIMIT = 0.05
"""Relative drift between the two baseline references above which a cell is rerun."""
DEGENERATE_SCORE = 0.5
"""Repetition score above which an output is flagged degenerate."""
ROUTER_OVER_BASELINE = 0.98
ROUTER_OVER_BEST = 0.90
ROUTER_OVER_ORACLE_GEOMEAN = 0.95
BEST_STATIC_CONTENT = ("code", "math", "json")
"""Content classes where the router must reach 0.90 × the best static config."""


@dataclass(frozen=True)
class Bracket:
    """A config measured between two baseline references (tok/s are medians).

    Attributes:
        before: baseline decode tok/s before the config.
        value: the config's decode tok/s.
        after: baseline decode tok/s after.
        drift: |after − before| ÷ before.
        ratio: value ÷ mean(before, after).
        valid: drift ≤ the limit.
    """

    before: float
    value: float
    after: float
    drift: float
    ratio: float
    valid: bool


def bracket(
    before: Sequence[float],
    value: Sequence[float],
    after: Sequence[float],
    limit: float = DRIFT_LIMIT,
) -> Bracket:
    """Reduce repeated measurements (tok/s) to a :class:`Bracket` of medians.

    Raises:
        ValueError: a sequence is empty, or a baseline median is not positive.
    """
    if not before or not value or not after:
        raise ValueError("each side of a bracket needs at least one measurement")
    b, v, a = (float(np.median(x)) for x in (before, value, after))
    if b <= 0 or a <= 0:
        raise ValueError("baseline references must be positive tok/s")
    drift = abs(a - b) / b
    return Bracket(b, v, a, drift, v / ((a + b) / 2), drift <= limit)


def repetition_score(text: str, n: int = 4) -> float:
    """Share of word ``n``-grams that repeat an earlier one, from 0.0 to 1.0."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def first_difference(a: Sequence[int] | str, b: Sequence[int] | str) -> int | None:
    """Index of the first element (token or character) where ``a`` and ``b`` differ.

    Returns None when they are equal; the shorter length when one is a prefix.
    """
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive values.

    Raises:
        ValueError: no values, or one that is not positive.
    """
    vals = list(values)
    if not vals or any(v <= 0 for v in vals):
        raise ValueError("geomean needs positive values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


@dataclass(frozen=True)
class Check:
    """One invariant check: what, the measured value, the bound, pass or fail."""

    name: str
    value: float
    bound: float
    passed: bool


def verdict(
    router: dict[str, float],
    static: dict[str, dict[str, float]],
    content: dict[str, str],
    baseline: str = "baseline",
) -> list[Check]:
    """The invariant checks over per-prompt decode tok/s.

    Args:
        router: prompt → the router's tok/s.
        static: prompt → config → tok/s, baseline included.
        content: prompt → content class (code, prose, math, json).
        baseline: the baseline config's name.

    Returns:
        One check per prompt for baseline, one per code/math/JSON prompt for the
        best static config, and the oracle geomean; all must pass for a PASS.

    Raises:
        KeyError: a prompt in ``router`` lacks static results or a content class.
        ValueError: a tok/s that is not positive.
    """
    checks: list[Check] = []
    ratios: list[float] = []
    for prompt, r in router.items():
        configs = static[prompt]
        base = configs[baseline]
        best_name = max(configs, key=lambda c: configs[c])
        best = configs[best_name]
        checks.append(
            Check(
                f"{prompt}: router ÷ baseline",
                r / base,
                ROUTER_OVER_BASELINE,
                r / base >= ROUTER_OVER_BASELINE,
            )
        )
        if content[prompt] in BEST_STATIC_CONTENT:
            checks.append(
                Check(
                    f"{prompt}: router ÷ best static ({best_name})",
                    r / best,
                    ROUTER_OVER_BEST,
                    r / best >= ROUTER_OVER_BEST,
                )
            )
        ratios.append(r / best)
    if ratios:
        g = geomean(ratios)
        checks.append(
            Check(
                "geomean router ÷ oracle",
                g,
                ROUTER_OVER_ORACLE_GEOMEAN,
                g >= ROUTER_OVER_ORACLE_GEOMEAN,
            )
        )
    return checks
