"""What a drafted token costs, as a server pays it: fitted from the requests it served.

Each answer's ``timings`` give its decode time, its target passes (``predicted_n −
draft_n_accepted``) and its drafted tokens (``draft_n``). Over one mode's answers,

    decode_ms ≈ pass_ms × passes + drafted_ms × drafted

by least squares without an intercept, and ``drafted_ms ÷ pass_ms`` is the draft cost in
passes, ``router.draft_cost``'s unit. It counts whatever the server does per drafted
position besides the batched forward pass: building the draft (ngram-simple searches the
context for each one, on the CPU cores the model also runs on), the sampler over the
longer batch, the bookkeeping. The pairs differ by mode on one machine: on the 2-core CPU
(SmolLM2, 2026-12-07, the agent sessions of
``results/verdict-cpu-smollm2-135m-20261207-sigmas/``) ngram-mod's server paid 0.22–0.24 of a
pass a drafted token and ngram-simple's 0.50–0.52, on one llama-server for both; on the H200
the agent mix paid 0.16–0.19 (``results/load-gpu-h200-cpu-smollm2-135m-20261207-agent-fresh-all/``).

:class:`ServedCostFit` keeps the five sums of the normal equations, so that a router can fit
it one answer at a time and a benchmark from a list (``fronde.bench.breakeven.served_cost``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIN_COST_REQUESTS", "ServedCostFit"]

MIN_COST_REQUESTS = 8
"""Answers with drafts a fit needs before its draft cost is used (fewer: the setting's)."""


@dataclass
class ServedCostFit:
    """Least squares of ``decode_ms`` on ``(passes, drafted)``, no intercept, one answer at a time.

    Attributes:
        pp, pd, dd: sums of passes², passes × drafted, drafted².
        py, dy: sums of passes × decode_ms, drafted × decode_ms.
        requests: answers folded in.
        drafted_requests: of them, answers with at least one drafted token.
        drafted: drafted tokens over all answers.
    """

    pp: float = 0.0
    pd: float = 0.0
    dd: float = 0.0
    py: float = 0.0
    dy: float = 0.0
    requests: int = 0
    drafted_requests: int = 0
    drafted: int = 0

    def add(self, passes: float, drafted: float, decode_ms: float) -> bool:
        """Fold in one answer: its target passes, drafted tokens and decode time (ms).

        Returns:
            False, and the answer left out, when a figure is negative: llama-server can
            count more accepted drafts than tokens predicted (an answer cut at its
            budget, H200 2026-12-04), which leaves ``predicted_n − draft_n_accepted``
            below zero.
        """
        if passes < 0 or drafted < 0 or decode_ms < 0:
            return False
        self.pp += passes * passes
        self.pd += passes * drafted
        self.dd += drafted * drafted
        self.py += passes * decode_ms
        self.dy += drafted * decode_ms
        self.requests += 1
        self.drafted_requests += drafted > 0
        self.drafted += round(drafted)
        return True

    def fit(self) -> tuple[float, float] | None:
        """``(pass_ms, drafted_ms)``, or None when the fit says nothing.

        None: nothing drafted, the system singular (passes and drafts in one fixed
        proportion), a pass that is not positive, or a drafted token below zero.
        """
        det = self.pp * self.dd - self.pd * self.pd
        if self.drafted == 0 or det <= 1e-9 * self.pp * self.dd:
            return None
        pass_ms = (self.py * self.dd - self.dy * self.pd) / det
        drafted_ms = (self.dy * self.pp - self.py * self.pd) / det
        if pass_ms <= 0 or drafted_ms < 0:
            return None
        return pass_ms, drafted_ms

    def draft_cost(self, min_requests: int = MIN_COST_REQUESTS) -> float | None:
        """``drafted_ms ÷ pass_ms`` once ``min_requests`` answers drafted, else None."""
        fitted = self.fit() if self.drafted_requests >= min_requests else None
        return None if fitted is None else fitted[1] / fitted[0]
