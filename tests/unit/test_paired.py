"""Paired gains: the weighted moments of ln(speed a ÷ speed b) and their lower bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fronde.evidence.paired import PairedGain


def test_two_samples_give_the_textbook_standard_error_with_equal_weights() -> None:
    g = PairedGain(alpha=0.5)
    g.update(2.0, 1.0)
    assert g.standard_error() is None and g.lower(1.0) is None
    g.update(1.0, 1.0)
    xs = [math.log(2.0), 0.0]
    assert g.mean == pytest.approx(float(np.mean(xs)))
    se = float(np.std(xs, ddof=1) / math.sqrt(2))
    assert g.standard_error() == pytest.approx(se)
    assert g.lower(1.0) == pytest.approx(math.exp(float(np.mean(xs)) - se))


def test_moments_match_a_weighted_computation_over_the_whole_history() -> None:
    rng = np.random.default_rng(7)
    xs = rng.normal(0.1, 0.3, size=12)
    alpha = 0.3
    g = PairedGain(alpha=alpha)
    for x in xs:
        g.update(math.exp(float(x)), 1.0)
    # The EMA's weights: α(1 − α)^k for the k-th newest, the oldest carrying the rest.
    n = len(xs)
    w = np.array([alpha * (1 - alpha) ** (n - 1 - i) for i in range(n)])
    w[0] = (1 - alpha) ** (n - 1)
    mean = float(np.sum(w * xs))
    biased = float(np.sum(w * (xs - mean) ** 2))
    s2 = float(np.sum(w**2))
    assert g.mean == pytest.approx(mean)
    assert g.var == pytest.approx(biased)
    assert g.s2 == pytest.approx(s2)
    assert g.standard_error() == pytest.approx(math.sqrt(biased / (1 - s2) * s2))


def test_a_steady_gain_is_sure_and_a_noisy_one_is_not() -> None:
    steady, noisy = PairedGain(alpha=0.3), PairedGain(alpha=0.3)
    for i in range(8):
        steady.update(1.10 + 0.01 * (i % 2), 1.0)
        noisy.update(1.6 if i % 2 else 0.7, 1.0)
    steady_low, noisy_low = steady.lower(1.0), noisy.lower(1.0)
    assert steady_low is not None and noisy_low is not None
    assert steady_low > 1.05
    assert noisy.mean is not None and math.exp(noisy.mean) > 1.0 > noisy_low


def test_a_speed_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        PairedGain(alpha=0.3).update(0.0, 1.0)
