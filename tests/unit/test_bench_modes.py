"""The proxy-vs-direct summary and verdict, on made-up samples."""

from __future__ import annotations

from typing import Literal

from fronde.bench.modes import ModesReport, Sample, _summarize, verdict  # pyright: ignore[reportPrivateUsage]


def sample(
    mode: str, path: Literal["proxy", "direct"], rep: int, server: float, client: float
) -> Sample:
    return Sample(
        mode=mode,
        path=path,
        rep=rep,
        predicted_n=100,
        server_tok_s=server,
        client_tok_s=client,
        draft_n=10 if mode != "baseline" else None,
        draft_n_accepted=7 if mode != "baseline" else None,
        wall_s=1.0,
        output_sha256="same",
        output_head="",
    )


def report(samples: list[Sample]) -> ModesReport:
    return ModesReport(
        started_at="t",
        machine={},
        commit=None,
        dirty=None,
        profile="p",
        max_tokens=100,
        reps=3,
        samples=samples,
        summary=_summarize(samples),
    )


def test_relay_efficiency_cancels_backend_variance() -> None:
    # The backend ran slower during the proxied requests (40 vs 50 tok/s), but
    # Fronde delivered every token it got: relay 1.0 although the raw ratio is 0.8.
    samples = [
        s
        for rep in range(3)
        for s in (
            sample("ngram-mod", "proxy", rep, 40, 40),
            sample("ngram-mod", "direct", rep, 50, 50),
        )
    ]
    [summary] = report(samples).summary
    assert summary.proxy_over_direct == 0.8
    assert summary.relay_efficiency == 1.0
    assert summary.alpha == 0.7
    ok, lines = verdict(report(samples))
    assert ok and lines[0].startswith("PASS ngram-mod: relay 1.000")


def test_a_slow_relay_fails_the_verdict() -> None:
    samples = [
        s
        for rep in range(3)
        for s in (
            sample("baseline", "proxy", rep, 40, 36),
            sample("baseline", "direct", rep, 40, 40),
            sample("ngram-simple", "proxy", rep, 80, 80),
            sample("ngram-simple", "direct", rep, 80, 80),
        )
    ]
    r = report(samples)
    by_mode = {s.mode: s for s in r.summary}
    assert by_mode["baseline"].relay_efficiency == 0.9
    assert by_mode["ngram-simple"].speedup_vs_baseline == 2.0
    ok, lines = verdict(r)
    assert not ok
    assert lines[0].startswith("FAIL baseline") and lines[1].startswith("PASS ngram-simple")


def test_router_bench_prompts_cover_each_class_they_claim() -> None:
    from fronde.bench.router import ROUTER_PROMPTS
    from fronde.router.classify import RequestClass, classify

    classes = {name: classify({"prompt": p}) for name, p in ROUTER_PROMPTS.items()}
    assert classes.pop("edit") is RequestClass.EDIT
    assert set(classes) == {"code", "prose", "math", "json"}
    assert set(classes.values()) == {RequestClass.GENERAL}
