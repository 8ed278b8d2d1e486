"""Shadow acceptance: the replay of llama.cpp's model-free drafters, with numbers."""

from __future__ import annotations

from typing import Any

import pytest

from fronde.bench.shadow import pearson, shadow_rows
from fronde.bench.workloads import Item, Workload
from fronde.evidence.ngram_replay import (
    NgramModTable,
    ngram_simple_drafter,
    replay,
    shadow_ngram_mod,
    shadow_ngram_simple,
)


def _scan_draft(tokens: list[int], sampled: int, n: int, m: int) -> list[int]:
    """llama.cpp's backward scan, written the slow way, to check the index against."""
    cur = len(tokens)
    if cur <= n + m + 1:
        return []
    pattern = [*tokens[cur - n + 1 :], sampled]
    for j in range(cur - n - 1, 0, -1):
        if tokens[j : j + n] == pattern:
            copy = min(m, cur - (j + n))
            return [] if copy < n else tokens[j + n : j + n + copy]
    return []


def test_indexed_ngram_simple_equals_the_backward_scan() -> None:
    import random

    rng = random.Random(7)
    tokens = [rng.randrange(4) for _ in range(400)]
    draft = ngram_simple_drafter(3, 5)
    for cur in range(1, 400):
        assert draft(tokens[:cur], tokens[cur - 1] ^ 1) == _scan_draft(
            tokens[:cur], tokens[cur - 1] ^ 1, 3, 5
        )


def test_a_pure_copy_is_drafted_and_accepted() -> None:
    body = list(range(100, 160))  # 60 distinct tokens
    prompt = [*body, 1, 2]  # the original, then a separator
    generated = body[:]  # the model copies the original
    s = shadow_ngram_simple(prompt, generated, size_n=4, size_m=8)
    # Nothing matches until size_n tokens of the copy exist; then drafts of 8 are all right.
    assert s.drafted > 0
    assert s.alpha == 1.0
    assert s.generated == 60
    assert s.tau > 4.0


def test_text_that_never_repeats_drafts_nothing() -> None:
    s = shadow_ngram_simple(list(range(50)), list(range(50, 150)), size_n=3, size_m=4)
    assert (s.drafted, s.accepted, s.alpha, s.tau) == (0, 0, None, 1.0)
    assert s.passes == 100


def test_replay_counts_passes_like_llama_server() -> None:
    # A drafter that always proposes the next 3 true tokens but the third is wrong.
    truth = list(range(10))

    def drafter(context: list[int] | tuple[int, ...], sampled: int) -> list[int]:
        del context
        return [sampled + 1, sampled + 2, -1]

    s = replay([], truth, drafter)  # type: ignore[arg-type]
    # Passes: prefill → 0; then each pass accepts 2 and samples 1: 0→3→6→9 (3 passes).
    assert s.passes == 4
    assert s.accepted == 6
    assert s.generated == 10
    assert s.tau == pytest.approx(10 / 4)
    # τ = n / (n − accepted), the definition measure.py applies to timings.
    assert s.tau == pytest.approx(s.generated / (s.generated - s.accepted))


def test_the_budget_cuts_drafts_near_the_end() -> None:
    truth = list(range(6))

    def drafter(context: list[int] | tuple[int, ...], sampled: int) -> list[int]:
        del context
        return [sampled + 1, sampled + 2, sampled + 3, sampled + 4]

    s = replay([], truth, drafter, n_predict=6)  # type: ignore[arg-type]
    # After token 0: remaining 5, draft cut to 4, accepts 1..4, samples 5. Done.
    assert (s.drafted, s.accepted, s.passes) == (4, 4, 2)


def test_ngram_mod_needs_a_chain_of_n_min() -> None:
    body = list(range(100, 200))
    prompt = [*body, 7]
    short = NgramModTable(n_match=4, n_max=16, n_min=8)
    short.begin(prompt)
    # The context ends inside the known text: a chain of 16 follows.
    assert short.draft(body[:20], body[20]) == body[21:37]
    # Near the end of the known text the chain breaks after fewer than n_min tokens.
    assert short.draft(body[:95], body[95]) == []


def test_ngram_mod_copy_and_the_low_acceptance_reset() -> None:
    body = list(range(100, 200))
    s = shadow_ngram_mod([*body, 7], body, n_match=4)
    assert s.alpha is not None and s.alpha > 0.9
    tab = NgramModTable(n_match=2, n_max=4, n_min=1)
    tab.begin([1, 2, 3, 4, 5, 6])
    for _ in range(5):
        assert tab.draft([9, 1], 2) == [3, 4, 5, 6]
        tab.accept(4, 0)
    assert len(tab) == 0  # five low passes in a row cleared the table


def test_pearson_treats_no_draft_as_zero_and_needs_three_points() -> None:
    assert pearson([0.1, 0.5], [0.1, 0.5]) is None
    assert pearson([None, 0.5, 0.9], [0.0, 0.5, 0.9]) == pytest.approx(1.0)
    assert pearson([0.2, 0.2, 0.2], [0.1, 0.5, 0.9]) is None


def _run(arm: str, item: str, ids: list[int], tok_s: float, alpha: float | None) -> dict[str, Any]:
    return {
        "arm": arm,
        "item": item,
        "ok": True,
        "ids": ids,
        "alpha": alpha,
        "timings": {"predicted_per_second": tok_s},
    }


def test_shadow_rows_mirror_ngram_mods_pool_across_the_servers_requests() -> None:
    chain = list(range(100, 200))  # 100 tokens that repeat nowhere in either prompt
    prompts = {"first": list(range(1, 30)), "second": list(range(30, 60))}
    workload = Workload("w", tuple(Item(k, "d", k, ()) for k in prompts))
    samples = [
        _run("base", "first", chain, 40.0, None),
        _run("mod", "first", chain, 40.0, None),
        _run("base", "second", chain, 40.0, None),
        _run("mod", "second", chain, 80.0, 0.9),
    ]
    rows = shadow_rows(samples, workload, prompts.__getitem__, n_match=12, probe_tokens=48)
    assert [(r["prompt"], r["mode"]) for r in rows] == [("first", "mod"), ("second", "mod")]
    first, second = rows
    # Its first sight of the chain: nothing to draft, from its own output or from base's.
    assert first["own"] is None and first["from_base"] is None
    # The second request repeats the first's answer: the mirrored pool drafts it, a
    # fresh table (what Fronde sees of one request) does not.
    assert second["own"] is not None and second["own"] > 0.5
    assert second["from_base"] is None
    assert second["real"] == 0.9 and second["speed"] == pytest.approx(2.0)
