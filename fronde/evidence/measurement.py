"""One generation's figures, an EMA, and a mode's speed from its recent samples.

Pure values for :class:`~fronde.evidence.measure.Measurements` (the router's
bookkeeping, whose module docstring gives the rules) and the counterfactual book:

- :class:`Measurement`: a generation's decode tok/s (llama-server's
  ``timings.predicted_per_second``, which excludes prefill and the first token),
  **α** (acceptance rate) = ``draft_n_accepted`` ÷ ``draft_n``, **τ** (mean accepted
  length, tokens per target pass) and its **step rate**, cost-weighted target passes
  per second (each drafted token costs :data:`DRAFT_COST` decode steps to verify).
- :class:`Ema`: an exponential moving average, smoothing ``EMA_ALPHA = 0.30``
  (original FRONDE router).
- :func:`speed_summary` (the live page's figure for a mode, and the trusted speed of
  a (mode, class)): the median of the last ``SPEED_WINDOW = 5`` samples, trusted once
  ``MIN_TRUSTED_SAMPLES = 3`` of them are younger than ``STALE_S = 600`` seconds.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, TypedDict

from fronde.config_router import ROUTER_DEFAULTS
from fronde.timings import Timings

__all__ = [
    "DRAFT_COST",
    "EMA_ALPHA",
    "MIN_TOKENS",
    "MIN_TRUSTED_SAMPLES",
    "SPEED_WINDOW",
    "STALE_S",
    "Ema",
    "Measurement",
    "SpeedSummary",
    "SpeedView",
    "measurement_from_timings",
    "speed_summary",
]

EMA_ALPHA: float = ROUTER_DEFAULTS.ema_alpha
"""Weight of the newest observation in each EMA: 0.30 (original FRONDE router;
``router.ema_alpha``)."""

DRAFT_COST: float = ROUTER_DEFAULTS.draft_cost
"""Verify cost of one drafted token, in decode steps: a target pass over k tokens takes
``1 + DRAFT_COST·(k − 1)`` steps. Measured with llama-bench at depth 256
(``results/atlas-*/verify-cost.json``): r(17) = 3.96 and r(33) = 7.34 steps on 2 CPU
cores (0.19 a token), r(17) = 1.40 on an H200 (0.025). The CPU's figure is the default:
where drafts are cheaper it overstates a drafting request's work, which only makes a
collapse harder to call (``router.draft_cost``)."""

MIN_TOKENS = 16
"""Generations shorter than this (tokens) are too noisy to update an EMA or judge a collapse."""

SPEED_WINDOW = 5
"""Recent samples per (mode, class) kept for the trusted (median) speed."""

MIN_TRUSTED_SAMPLES = 3
"""Fresh samples a (mode, class) needs before floors and probes rely on its speed."""

STALE_S = 600.0
"""Samples older than this, seconds, no longer count: the mode is measured again."""


@dataclass(frozen=True)
class Measurement:
    """One generation's figures, from llama-server's ``timings``.

    Attributes:
        tokens: generated tokens (``predicted_n``).
        decode_tok_s: decode tok/s (``predicted_per_second``).
        alpha: α = accepted ÷ drafted, or None when nothing was drafted.
        tau: τ = tokens per target pass, or None when nothing was drafted.
        decode_ms: decode time (``predicted_ms``); 0 when not reported.
        drafted: tokens drafted (``draft_n``).
        accepted: drafted tokens accepted (``draft_n_accepted``).
    """

    tokens: int
    decode_tok_s: float
    alpha: float | None = None
    tau: float | None = None
    decode_ms: float = 0.0
    drafted: int = 0
    accepted: int = 0

    def step_rate(self, draft_cost: float = DRAFT_COST) -> float:
        """Cost-weighted target passes per second (see :mod:`fronde.evidence.measure`).

        ``(passes + draft_cost × drafted) ÷ decode seconds``, passes = tokens −
        accepted; the decode tok/s when the decode time is not reported or nothing
        was drafted.
        """
        if self.decode_ms <= 0 or self.drafted <= 0:
            return self.decode_tok_s
        work = self.tokens - self.accepted + draft_cost * self.drafted
        return work / (self.decode_ms / 1000.0)

    @classmethod
    def of(cls, t: Timings) -> Measurement:
        """The figures of parsed ``timings``.

        α and τ as :class:`~fronde.timings.Timings` defines them.
        """
        return cls(
            t.predicted_n,
            t.predicted_per_second,
            t.alpha,
            t.tau,
            t.predicted_ms,
            t.draft_n,
            t.draft_n_accepted,
        )


def measurement_from_timings(timings: object) -> Measurement | None:
    """Build a :class:`Measurement` from a llama-server ``timings`` JSON object.

    Returns:
        None when the object lacks ``predicted_n`` or ``predicted_per_second``.
    """
    t = Timings.parse(timings)
    return None if t is None else Measurement.of(t)


@dataclass
class Ema:
    """Exponential moving average: ``value ← α·x + (1 − α)·value`` (first x taken as is)."""

    alpha: float = EMA_ALPHA
    value: float | None = None
    samples: int = 0

    def update(self, x: float) -> float:
        """Fold ``x`` in and return the new value."""
        self.value = x if self.value is None else self.alpha * x + (1 - self.alpha) * self.value
        self.samples += 1
        return self.value


class SpeedView(TypedDict):
    """:meth:`SpeedSummary.as_dict`: tok/s to 0.1, age to 0.1 s."""

    median_tok_s: float | None
    fresh: int
    kept: int
    newest_age_s: float | None
    state: Literal["unmeasured", "stale", "few", "trusted"]


@dataclass(frozen=True)
class SpeedSummary:
    """Recent decode speed samples in one figure, with what it rests on.

    Attributes:
        median_tok_s: median decode tok/s of the fresh samples (younger than
            :data:`STALE_S`), or None when there is none.
        fresh: how many samples are fresh.
        kept: how many samples are kept (at most :data:`SPEED_WINDOW`).
        newest_age_s: age of the newest sample, seconds, or None when there is none.
        state: ``unmeasured`` (no sample), ``stale`` (none fresh), ``few`` (fewer than
            :data:`MIN_TRUSTED_SAMPLES` fresh) or ``trusted``.
    """

    median_tok_s: float | None
    fresh: int
    kept: int
    newest_age_s: float | None
    state: Literal["unmeasured", "stale", "few", "trusted"]

    def as_dict(self) -> SpeedView:
        """JSON-ready view (tok/s to 0.1, age to 0.1 s)."""
        med, age = self.median_tok_s, self.newest_age_s
        return {
            "median_tok_s": None if med is None else round(med, 1),
            "fresh": self.fresh,
            "kept": self.kept,
            "newest_age_s": None if age is None else round(age, 1),
            "state": self.state,
        }


def speed_summary(samples: Iterable[tuple[float, float]], now: float) -> SpeedSummary:
    """Summarize ``(time s, tok/s)`` samples at ``now`` (monotonic s): median of the fresh ones.

    Example: samples of 38, 1.3 and 41 tok/s, 5–20 s old, give a trusted median of 38;
    the one sample 1.3 alone gives state ``few``, shown small, never as the mode's speed.
    """
    kept = list(samples)
    if not kept:
        return SpeedSummary(None, 0, 0, None, "unmeasured")
    fresh = [v for t, v in kept if now - t <= STALE_S]
    newest = now - max(t for t, _ in kept)
    if not fresh:
        return SpeedSummary(None, 0, len(kept), newest, "stale")
    state = "trusted" if len(fresh) >= MIN_TRUSTED_SAMPLES else "few"
    return SpeedSummary(statistics.median(fresh), len(fresh), len(kept), newest, state)
