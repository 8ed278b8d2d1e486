"""The draft cost a server pays, fitted one answer at a time, and the book's price per mode."""

from __future__ import annotations

import numpy as np
import pytest

from fronde.bench.breakeven import served_cost
from fronde.evidence.counterfactual import Counterfactual
from fronde.evidence.measurement import Measurement
from fronde.evidence.ngram_replay import ShadowStats
from fronde.evidence.served_cost import MIN_COST_REQUESTS, ServedCostFit
from fronde.modes import Mode, SpeculationSettings

SPEC = SpeculationSettings(ngram_mod_n_match=4, ngram_mod_n_min=2, ngram_mod_n_max=8)


def _answers(n: int, drafted_ms: float) -> list[tuple[float, float, float]]:
    """(passes, drafted, decode_ms) of ``n`` answers: 20 ms a pass, ``drafted_ms`` a draft."""
    rng = np.random.default_rng(3)
    out: list[tuple[float, float, float]] = []
    for _ in range(n):
        passes, drafted = float(rng.integers(40, 200)), float(rng.integers(0, 300))
        out.append((passes, drafted, 20.0 * passes + drafted_ms * drafted))
    return out


def test_the_fit_recovers_a_pass_and_a_drafted_token_and_waits_for_enough_drafts() -> None:
    fit = ServedCostFit()
    for i, (p, d, ms) in enumerate(_answers(12, 10.0)):
        fit.add(p, d, ms)
        if i + 1 < MIN_COST_REQUESTS:
            assert fit.draft_cost() is None
    assert fit.fit() == pytest.approx((20.0, 10.0))
    assert fit.draft_cost() == pytest.approx(0.5)


def test_no_fit_without_drafts_or_with_drafts_in_one_fixed_proportion() -> None:
    plain, fixed = ServedCostFit(), ServedCostFit()
    for k in range(10):
        plain.add(64.0 + k, 0.0, 1280.0)
        fixed.add(10.0 * (k + 1), 20.0 * (k + 1), 300.0 * (k + 1))
    assert plain.fit() is None and fixed.fit() is None
    # More drafts accepted than tokens predicted (cut at the budget): left out, not fitted.
    odd = ServedCostFit()
    assert odd.add(-1.0, 192.0, 144.9) is False and odd.requests == 0


def test_the_benchmarks_fit_is_least_squares_as_numpy_computes_it() -> None:
    rng = np.random.default_rng(5)
    rows = [(p, d, ms * rng.uniform(0.9, 1.1)) for p, d, ms in _answers(30, 6.0)]
    timings = [
        {
            "predicted_n": int(p) + int(d) // 2,
            "draft_n_accepted": int(d) // 2,
            "draft_n": int(d),
            "predicted_ms": ms,
        }
        for p, d, ms in rows
    ]
    x = np.array([[t["predicted_n"] - t["draft_n_accepted"], t["draft_n"]] for t in timings])
    (a, b), *_ = np.linalg.lstsq(x, np.array([t["predicted_ms"] for t in timings]), rcond=None)
    got = served_cost(timings)
    assert got is not None
    assert (got.pass_ms, got.drafted_ms) == pytest.approx((a, b))


def _book(fit_cost: bool) -> Counterfactual:
    """ngram-simple served 10 answers whose drafted tokens cost half a pass each."""
    book = Counterfactual(SPEC, [Mode.BASELINE, Mode.NGRAM_SIMPLE], fit_cost=fit_cost)
    for i, (p, d, ms) in enumerate(_answers(10, 10.0)):
        tokens, drafted = int(p) + int(d) // 2, int(d)
        m = Measurement(tokens, tokens / ms * 1000, None, None, ms, drafted, int(d) // 2)
        stats = {
            Mode.BASELINE: ShadowStats(tokens, 0, 0, tokens),
            Mode.NGRAM_SIMPLE: ShadowStats(tokens, drafted, int(d) // 2, int(p)),
        }
        book.observe(f"general|{i}", Mode.NGRAM_SIMPLE, m, stats)
    return book


def test_the_book_prices_a_modes_drafts_by_what_its_server_paid() -> None:
    fitted, fixed = _book(fit_cost=True), _book(fit_cost=False)
    assert fitted.cost(Mode.NGRAM_SIMPLE) == pytest.approx(0.5)
    assert fitted.cost(Mode.NGRAM_MOD) == fitted.draft_cost == 0.2  # never served
    assert fixed.cost(Mode.NGRAM_SIMPLE) == 0.2
    assert fitted.snapshot()["draft_cost_by_mode"] == {"ngram-simple": pytest.approx(0.5)}
    prior = Counterfactual(SPEC, [Mode.NGRAM_MOD], prior_costs={Mode.NGRAM_MOD: 0.3})
    assert prior.cost(Mode.NGRAM_MOD) == 0.3  # the machine's saved price, until its own fit
