"""The counterfactual book's state as ``/fronde/v1/router`` shows it: typed rows.

:meth:`~fronde.evidence.counterfactual.Counterfactual.snapshot` writes these; the
router's views read its ``buckets`` by key. Speeds are tok/s, times ms, errors and
speed-ups fractions (0.03 is 3 %); an EMA with no sample yet is None.
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["BucketView", "CounterfactualView"]


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
    buckets: dict[str, BucketView]
