"""How sure a bucket is that one mode decodes faster than another, from paired samples.

The counterfactual book replays every n-gram mode on every answer, so each request
gives a *paired* sample of two modes' speeds: the same prompt, the same answer, the
same pass time. Its prediction for a bucket is an EMA of such samples, and the EMA
of the next request misses by much more than the replay does: on the 2-core CPU
(SmolLM2, agent sessions, 2026-12-07) the chosen mode's prediction missed its actual
speed by a median 41–68 % where the replay of the same answer missed by 0.3 %. The
requests of one bucket differ more than the modes do. A mode whose point prediction
is 3 % above the floor's is then chosen on noise, and the floor's server loses the
n-gram memory of that request.

:class:`PairedGain` keeps, per pair of modes, the exponentially weighted mean and
variance of ``x = ln(speed_a ÷ speed_b)`` over the bucket's requests (the same weights
as the book's EMA, so the mean is the log of the ratio the book predicts), and
:meth:`PairedGain.lower` gives the gain of ``a`` over ``b``, or of ``b`` over ``a``
(the same moments, the mean negated), that the samples support at ``sigmas`` standard
errors below the mean.

Formulas:

- mean and variance, incrementally: ``d = x − mean; mean += α·d;
  var = (1 − α)·(var + α·d²)`` (T. Finch, *Incremental calculation of weighted mean
  and variance*, 2009, §9).
- the sum of squared weights, ``S₂ ← α² + (1 − α)²·S₂`` (1 after the first sample);
  Kish's effective sample size is ``1 ÷ S₂`` (5.7 at α = 0.3 in the long run).
- the unbiased weighted variance of one sample, ``var ÷ (1 − S₂)`` (reliability
  weights, whose sum is 1), and the standard error of the weighted mean,
  ``√(var ÷ (1 − S₂) × S₂)``. With two samples that differ by ``d`` this is
  ``|d|/2 × √(2·S₂)``, the familiar ``s/√n`` when the weights are equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PairedGain"]


@dataclass
class PairedGain:
    """Exponentially weighted moments of a log speed ratio, ``ln(speed_a ÷ speed_b)``.

    Attributes:
        alpha: the EMA weight of the newest sample (the book's ``router.ema_alpha``).
        mean: weighted mean of the log ratio (None before the first sample).
        var: weighted (biased) variance of the log ratio.
        s2: sum of the squared weights.
        samples: how many samples were folded in.
    """

    alpha: float
    mean: float | None = None
    var: float = 0.0
    s2: float = 1.0
    samples: int = 0

    def update(self, a_tok_s: float, b_tok_s: float) -> None:
        """Fold in one request's pair of speeds (tok/s, both > 0).

        Raises:
            ValueError: a speed is not positive.
        """
        if a_tok_s <= 0 or b_tok_s <= 0:
            raise ValueError(f"speeds must be positive, got {a_tok_s} and {b_tok_s}")
        x = math.log(a_tok_s / b_tok_s)
        self.samples += 1
        if self.mean is None:
            self.mean = x
            return
        a = self.alpha
        d = x - self.mean
        self.mean += a * d
        self.var = (1 - a) * (self.var + a * d * d)
        self.s2 = a * a + (1 - a) ** 2 * self.s2

    def standard_error(self) -> float | None:
        """The standard error of :attr:`mean`, or None with fewer than two samples."""
        if self.mean is None or self.samples < 2 or self.s2 >= 1.0:
            return None
        return math.sqrt(self.var / (1.0 - self.s2) * self.s2)

    def lower(self, sigmas: float, *, reverse: bool = False) -> float | None:
        """``speed_a ÷ speed_b`` at ``sigmas`` standard errors below the mean, or None.

        ``exp(mean − sigmas × standard error)``; ``reverse``: ``speed_b ÷ speed_a``, the
        mean negated. None with fewer than two samples.
        """
        se = self.standard_error()
        if self.mean is None or se is None:
            return None
        return math.exp((-self.mean if reverse else self.mean) - sigmas * se)
