"""Timings: llama-server's ``timings`` parsed once; α, τ and usage defined in one place."""

from __future__ import annotations

import pytest

from fronde.timings import Timings, TimingsTrail


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


def per_token(passes: list[tuple[int, int]]) -> list[dict[str, int | float]]:
    """llama-server's per-token ``timings`` for a first token, then verify passes.

    Each pass is (drafted, accepted); as ``server-context.cpp`` does, its counts are
    added before its ``accepted + 1`` tokens are sent one by one.
    """
    out: list[dict[str, int | float]] = [{"predicted_n": 1, "predicted_per_second": 50.0}]
    drafted = accepted = 0
    n = 1
    for d, a in passes:
        drafted, accepted = drafted + d, accepted + a
        for _ in range(a + 1):
            n += 1
            out.append(
                {"predicted_n": n, "predicted_per_second": 50.0, "draft_n": drafted,
                 "draft_n_accepted": accepted}
            )  # fmt: skip
    return out


def test_a_stream_cut_inside_a_pass_counts_only_the_drafts_it_sent() -> None:
    """The demo's edit: cut at its closing fence inside a long pass, τ came out None."""
    events = per_token([(8, 8), (8, 8), (16, 16)])  # 1 + 9 + 9 + 17 = 36 tokens
    trail = TimingsTrail()
    folded = [trail.add(t) for t in events[:22]][-1]  # cut 3 tokens into the third pass
    raw = Timings.parse(events[21])
    assert raw is not None and raw.tau is None  # 22 tokens, 32 "accepted": no pass left
    got = Timings.parse(folded)
    assert got is not None
    # Sent: the first token, 8 + 1, 8 + 1, then 3 drafts of the third pass.
    assert (got.predicted_n, got.draft_n_accepted, got.draft_n) == (22, 19, 19)
    assert got.tau == pytest.approx(22 / 3)  # 3 target passes: prefill's token, 2 verifies
    assert got.alpha == 1.0
    assert trail.latest == folded


def test_a_trail_leaves_whole_passes_and_end_only_timings_as_llama_server_wrote_them() -> None:
    events = per_token([(8, 3), (8, 0), (8, 5)])  # a pass that accepted nothing too
    trail = TimingsTrail()
    folded = [trail.add(t) for t in events]
    ends = [0, 4, 5, 11]  # the first token, then each pass's last: sent whole
    assert [folded[i] for i in ends] == [events[i] for i in ends]
    assert folded[1] == {**events[1], "draft_n": 6, "draft_n_accepted": 1}  # 1 of 3 sent
    trail = TimingsTrail()
    for t in events[:3]:  # 2 of the first pass's 4 tokens sent, both drafts
        trail.add(t)
    assert trail.latest is not None
    assert (trail.latest["draft_n_accepted"], trail.latest["draft_n"]) == (2, 7)
    only_end = TimingsTrail()
    final = {"predicted_n": 30, "predicted_per_second": 40.0, "draft_n": 40, "draft_n_accepted": 29}
    assert only_end.add(final) == final  # no per-token history: as llama-server wrote it
    assert only_end.add({"predicted_n": "x"}) is None and only_end.latest == final
