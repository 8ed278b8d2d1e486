"""What the counterfactual book gives out: one request's observation, and its typed views.

:meth:`~fronde.evidence.counterfactual.Counterfactual.observe` returns an
:class:`Observation`; :meth:`~fronde.evidence.counterfactual.Counterfactual.snapshot` writes
the state ``/fronde/v1/router`` shows, whose ``buckets`` the router's views read by key.
Speeds are tok/s, times ms, errors and speed-ups fractions (0.03 is 3 %); an EMA with no
sample yet is None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from fronde.evidence.ngram_replay import ShadowStats
from fronde.modes import Mode

__all__ = ["BucketView", "CounterfactualView", "Observation"]


class BucketView(TypedDict):
    """One bucket: its ``samples``, and per mode its decode tok/s and speed-up EMAs."""

    samples: int
    decode_tok_s: dict[str, float | None]
    speedup: dict[str, float | None]


class CounterfactualView(TypedDict):
    """The whole book: its settings, calibrations, mirrors, errors and buckets."""

    band: float
    draft_cost: float
    own_baseline_step: bool
    pass_ms: dict[str, float]
    calibration: dict[str, float | None]
    step_ms: dict[str, float | None]
    mirror_entries: dict[str, int]
    median_error: dict[str, float | None]
    errors_counted: dict[str, int]
    mode_errors: dict[str, float]
    draft_cost_by_mode: dict[str, float]  # the price of a drafted token the book uses, passes
    buckets: dict[str, BucketView]


@dataclass(frozen=True)
class Observation:
    """What one request told the book.

    Attributes:
        served: the mode that ran.
        speed: mode → counterfactual decode tok/s on this request (the served mode's
            is its replay, calibrated, beside its actual).
        actual_tok_s: the served mode's real decode tok/s.
        replay_error: |replayed ÷ actual decode time − 1| of the served mode, before
            this request's calibration update.
        stats: mode → the replay's counts.
    """

    served: Mode
    speed: dict[Mode, float]
    actual_tok_s: float
    replay_error: float
    stats: dict[Mode, ShadowStats]
