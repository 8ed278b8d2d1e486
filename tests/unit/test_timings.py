"""Timings: llama-server's ``timings`` parsed once; α, τ and usage defined in one place."""

from __future__ import annotations

import pytest

from fronde.timings import Timings


def test_alpha_and_tau_come_from_the_draft_counts() -> None:
    t = Timings.parse(
        {"predicted_n": 100, "predicted_per_second": 50.0, "draft_n": 80, "draft_n_accepted": 60}
    )
    assert t is not None
    assert t.alpha == pytest.approx(0.75)
    assert t.tau == pytest.approx(100 / 40)  # 40 target passes for 100 tokens
    plain = Timings.parse({"predicted_n": 10, "predicted_per_second": 40.0})
    assert plain is not None and plain.alpha is None and plain.tau is None


@pytest.mark.parametrize(
    "obj",
    [None, [], {"predicted_n": 3}, {"predicted_n": "3", "predicted_per_second": 1.0},
     {"predicted_n": True, "predicted_per_second": 1.0}],
)  # fmt: skip
def test_what_is_not_timings_parses_to_none(obj: object) -> None:
    assert Timings.parse(obj) is None


def test_segments_add_up_to_one_answer() -> None:
    a = Timings(48, 40.0, predicted_ms=1200.0, prompt_n=20, draft_n=10, draft_n_accepted=5)
    b = Timings(52, 80.0, predicted_ms=650.0, cache_n=68, draft_n=30, draft_n_accepted=25)
    t = Timings.total([a, b])
    assert (t.predicted_n, t.predicted_ms) == (100, 1850.0)
    assert t.predicted_per_second == pytest.approx(100 / 1.85)
    assert t.alpha == pytest.approx(30 / 40)
    assert t.usage() == {"prompt_tokens": 88, "completion_tokens": 100, "total_tokens": 188}
    assert t.as_json()["draft_n_accepted"] == 30
    assert "draft_n" not in Timings.total([]).as_json()
