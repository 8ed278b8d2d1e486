"""The counterfactual book: replay every mode, predict per bucket, route on the prediction."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from fronde import compose
from fronde.backends.client import BackendClient
from fronde.config_router import PredictMisses
from fronde.evidence.bucket import bucket_of, self_overlap
from fronde.evidence.counterfactual import MIN_BUCKET_SAMPLES, MIN_MODE_ERRORS, Counterfactual
from fronde.evidence.measurement import Measurement
from fronde.evidence.ngram_replay import NgramModTable, ShadowStats, shadow_ngram_mod
from fronde.modes import Mode, SpeculationSettings
from fronde.request.hindsight import Hindsight
from fronde.router.classify import RequestClass
from fronde.router.engine import Router
from fronde.router.plan import Plan, Route, RouterPolicy, Situation
from fronde.router.policy import choose_predicted, plan_route

from .test_api import serve, wait_healthy


def _route(cls: RequestClass, **at: Any) -> Plan:
    """``plan_route`` with the situation given as keywords (the tests' shorthand)."""
    return plan_route(cls, Situation(**at))


ALL = list(Mode)
SPEC = SpeculationSettings(ngram_mod_n_match=4, ngram_mod_n_min=2, ngram_mod_n_max=8)


def _no_speed(mode: Mode, cls: str) -> float | None:
    return None


def test_self_overlap_scores_repeated_text_high_and_fresh_text_zero() -> None:
    fresh = " ".join(f"w{i}" for i in range(100))
    assert self_overlap(fresh) == 0.0
    assert self_overlap("too short") == 0.0
    block = " ".join(f"w{i}" for i in range(50))
    assert self_overlap(f"{block} rewrite this: {block}") > 0.4


def test_buckets_split_by_class_and_overlap() -> None:
    assert bucket_of("general", 0.0) == "general|low"
    assert bucket_of("general", 0.1) == "general|mid"
    assert bucket_of("edit", 0.6) == "edit|high"


def test_a_fork_learns_nothing_into_its_mirror() -> None:
    mirror = NgramModTable(n_match=2, n_max=4, n_min=1)
    prompt, generated = [1, 2, 3, 4, 5, 6], [7, 8, 9, 1, 2, 3, 4]
    shadow_ngram_mod(prompt, generated, table=mirror.fork())
    assert len(mirror) == 0
    shadow_ngram_mod(prompt, generated, table=mirror)
    learnt = len(mirror)
    assert learnt > 0
    fork = mirror.fork()
    shadow_ngram_mod([20, 21, 22, 23], [24, 25, 26], table=fork)
    assert len(mirror) == learnt
    assert len(fork) > learnt


def test_ngram_mod_is_drafted_from_its_servers_memory_only_where_it_served() -> None:
    book = Counterfactual(SPEC, ALL)
    text = list(range(100, 140))
    first = book.replay(Mode.BASELINE, [1, 2, 3, 4, 5], text, None)
    assert first[Mode.NGRAM_MOD].drafted == 0
    # Served elsewhere: ngram-mod's server never saw it, so a repeat drafts nothing.
    again = book.replay(Mode.BASELINE, [9, 8, 7, 6, 5], text, None)
    assert again[Mode.NGRAM_MOD].drafted == 0
    # Served by ngram-mod: its table now holds the answer, and a repeat copies it.
    book.replay(Mode.NGRAM_MOD, [1, 2, 3, 4, 5], text, None)
    warm = book.replay(Mode.BASELINE, [9, 8, 7, 6, 5], text, None)
    assert warm[Mode.NGRAM_MOD].accepted >= 20  # answers enter the table in 32-token chunks
    assert warm[Mode.BASELINE] == first[Mode.BASELINE]
    assert warm[Mode.CASCADE].accepted == 0  # the cascade's server saw none of it


def test_cascade_drafts_what_ngram_simple_copies_from_the_prompt() -> None:
    book = Counterfactual(SPEC, ALL)
    block = list(range(200, 260))
    stats = book.replay(Mode.BASELINE, [*block, 5, 6], block, None)
    assert stats[Mode.NGRAM_SIMPLE].accepted > 20
    assert stats[Mode.CASCADE].accepted >= stats[Mode.NGRAM_SIMPLE].accepted


def _measure(tokens: int, decode_ms: float, drafted: int = 0, accepted: int = 0) -> Measurement:
    return Measurement(tokens, tokens / decode_ms * 1000, None, None, decode_ms, drafted, accepted)


def test_the_served_modes_replay_reproduces_its_actual_speed() -> None:
    book = Counterfactual(SPEC, ALL, draft_cost=0.2)
    prompt, gen = [1, 2, 3], list(range(10, 74))
    stats = book.replay(Mode.BASELINE, prompt, gen, None)
    obs = book.observe("general|low", Mode.BASELINE, _measure(64, 1600.0), stats)
    assert obs is not None
    assert obs.speed[Mode.BASELINE] == pytest.approx(40.0)
    assert obs.replay_error == pytest.approx(0.0)
    # Nothing to copy: every n-gram mode is predicted at plain speed.
    assert obs.speed[Mode.NGRAM_MOD] == pytest.approx(40.0)


def test_a_copying_answer_predicts_ngram_modes_faster_by_the_verify_cost_model() -> None:
    book = Counterfactual(SPEC, ALL, draft_cost=0.2)
    block = list(range(300, 364))
    stats = book.replay(Mode.BASELINE, [*block, 7], block, None)
    obs = book.observe("edit|high", Mode.BASELINE, _measure(64, 1600.0), stats)
    assert obs is not None
    simple = stats[Mode.NGRAM_SIMPLE]
    expected = 64 / (25.0 * (simple.passes + 0.2 * simple.drafted) / 1000)  # step 25 ms
    assert obs.speed[Mode.NGRAM_SIMPLE] == pytest.approx(expected)
    assert obs.speed[Mode.NGRAM_SIMPLE] > 1.5 * obs.speed[Mode.BASELINE]


def test_predictions_need_evidence_and_errors_are_counted() -> None:
    book = Counterfactual(SPEC, ALL)
    gen = list(range(10, 74))
    for i in range(MIN_BUCKET_SAMPLES):
        assert book.predict("general|low") == {}
        stats = book.replay(Mode.NGRAM_MOD, [i, i + 1], gen, None)
        book.observe("general|low", Mode.NGRAM_MOD, _measure(64, 1600.0), stats)
    assert book.predict("general|low")[Mode.BASELINE] == pytest.approx(40.0)
    assert book.speedups("general|low")[Mode.NGRAM_SIMPLE] == pytest.approx(1.0)
    assert book.errors()["predicted"] is None
    stats = book.replay(Mode.NGRAM_MOD, [5, 6], gen, None)
    book.observe("general|low", Mode.NGRAM_MOD, _measure(64, 2000.0), stats, predicted_tok_s=40.0)
    assert book.errors()["predicted"] == pytest.approx(40.0 / 32.0 - 1.0)


def test_too_short_or_untimed_answers_are_not_counted() -> None:
    book = Counterfactual(SPEC, ALL)
    stats = book.replay(Mode.BASELINE, [1], [2, 3, 4], None)
    assert book.observe("general|low", Mode.BASELINE, _measure(3, 100.0), stats) is None
    draft_only = book.replay(Mode.DRAFT, [1], list(range(5, 40)), None)
    assert Mode.DRAFT not in draft_only
    assert book.observe("general|low", Mode.DRAFT, _measure(35, 100.0), draft_only) is None


def test_choose_predicted_keeps_the_floor_within_the_band() -> None:
    usable = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD]
    close = {Mode.BASELINE: 1.0, Mode.NGRAM_SIMPLE: 1.25, Mode.NGRAM_MOD: 1.23}
    assert choose_predicted(close, usable, Mode.NGRAM_MOD, 0.03) is Mode.NGRAM_MOD
    far = {Mode.BASELINE: 1.0, Mode.NGRAM_SIMPLE: 1.40, Mode.NGRAM_MOD: 1.23}
    assert choose_predicted(far, usable, Mode.NGRAM_MOD, 0.03) is Mode.NGRAM_SIMPLE
    # A mode that is not usable (quarantined, absent) is never picked.
    assert choose_predicted(far, usable[::2], Mode.NGRAM_MOD, 0.03) is Mode.NGRAM_MOD
    # No prediction for the floor (a draft model): the rule stands aside.
    assert choose_predicted(far, [*usable, Mode.DRAFT], Mode.DRAFT, 0.03) is None


def test_a_mode_must_also_clear_the_books_own_misses_on_it() -> None:
    usable = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE]
    ups = {Mode.BASELINE: 1.0, Mode.NGRAM_SIMPLE: 1.40, Mode.NGRAM_MOD: 1.23, Mode.CASCADE: 1.30}
    floor = Mode.NGRAM_MOD
    assert choose_predicted(ups, usable, floor, 0.03) is Mode.NGRAM_SIMPLE
    assert choose_predicted(ups, usable, floor, 0.03, {}) is Mode.NGRAM_SIMPLE
    # ngram-simple was missed by 20 %: 1.40 is under 1.23 × 1.20; cascade clears 1.23 × 1.03.
    missed = {Mode.NGRAM_SIMPLE: 0.20}
    assert choose_predicted(ups, usable, floor, 0.03, missed) is Mode.CASCADE
    # With cascade missed by 10 % too (1.30 under 1.23 × 1.10), the floor stays.
    both = missed | {Mode.CASCADE: 0.10}
    assert choose_predicted(ups, usable, floor, 0.03, both) is Mode.NGRAM_MOD
    # An error smaller than the band changes nothing.
    small = {Mode.NGRAM_SIMPLE: 0.01}
    assert choose_predicted(ups, usable, floor, 0.03, small) is Mode.NGRAM_SIMPLE


def test_each_modes_errors_count_once_it_has_enough_predictions() -> None:
    book = Counterfactual(SPEC, ALL)
    gen = list(range(10, 74))
    for i in range(MIN_MODE_ERRORS):
        assert Mode.NGRAM_SIMPLE not in book.mode_errors()
        stats = book.replay(Mode.NGRAM_SIMPLE, [i, i + 1], gen, None)
        actual = _measure(64, 1600.0)  # 40 tok/s
        book.observe("general|low", Mode.NGRAM_SIMPLE, actual, stats, predicted_tok_s=60.0)
    assert book.mode_errors() == {Mode.NGRAM_SIMPLE: pytest.approx(0.5)}
    assert book.snapshot()["mode_errors"] == {"ngram-simple": pytest.approx(0.5)}


def _missed_book() -> Counterfactual:
    """A book whose ``general|low`` bucket predicts the n-gram modes above baseline, and
    which missed each of them, on requests of another bucket, by more than that."""
    book = Counterfactual(SPEC, ALL, draft_cost=0.2)
    block = list(range(300, 364))
    for i in range(MIN_BUCKET_SAMPLES):
        stats = book.replay(Mode.BASELINE, [*block, i], block, None)
        book.observe("general|low", Mode.BASELINE, _measure(64, 1600.0), stats)
    top = max(book.speedups("general|low").values())
    gen = list(range(10, 74))
    for mode in (Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE):
        for i in range(MIN_MODE_ERRORS):
            stats = book.replay(mode, [i, i + 1], gen, None)
            # 40 tok/s actual; predicted (1 + top) × that: an error of top.
            miss = 40.0 * (1.0 + top)
            book.observe("general|mid", mode, _measure(64, 1600.0), stats, predicted_tok_s=miss)
    return book


def test_with_parallel_slots_the_router_keeps_the_floor_against_modes_the_book_missed() -> None:
    ups = _missed_book().speedups("general|low")
    assert max(ups.values()) > 1.5 > ups[Mode.BASELINE]
    policy = RouterPolicy(floor=Mode.BASELINE)
    one = Router(policy, counterfactual=_missed_book(), slots=1)
    d = one.plan(RequestClass.GENERAL, "k", ALL)
    # One generation at a time (a CPU): the band alone, as its verdicts measured.
    assert d.plan.route is Route.PREDICTED and d.plan.mode is not Mode.BASELINE
    gpu = Router(policy, counterfactual=_missed_book(), slots=16)
    d = gpu.plan(RequestClass.GENERAL, "k", ALL)
    assert (d.plan.route, d.plan.mode) == (Route.PREDICTED, Mode.BASELINE)


def test_router_predict_misses_sets_where_the_books_misses_raise_the_bar() -> None:
    def chosen(misses: PredictMisses, slots: int) -> Mode:
        policy = RouterPolicy(floor=Mode.BASELINE, predict_misses=misses)
        router = Router(policy, counterfactual=_missed_book(), slots=slots)
        d = router.plan(RequestClass.GENERAL, "k", ALL)
        assert d.plan.route is Route.PREDICTED
        return d.plan.mode

    assert chosen("always", 1) is Mode.BASELINE  # a CPU held to the book's misses
    assert chosen("never", 16) is not Mode.BASELINE  # a GPU on the band alone
    assert chosen("parallel", 16) is Mode.BASELINE


def _noisy_book(simple_passes: tuple[int, int]) -> Counterfactual:
    """A ``general|low`` bucket of 8 requests: ngram-mod takes 50 passes for 64 tokens
    on each, ngram-simple ``simple_passes`` in turn (its point prediction the higher)."""
    book = Counterfactual(SPEC, [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD])
    for i in range(8):
        stats = {
            Mode.BASELINE: ShadowStats(64, 0, 0, 64),
            Mode.NGRAM_MOD: ShadowStats(64, 14, 14, 50),
            Mode.NGRAM_SIMPLE: ShadowStats(64, 30, 30, simple_passes[i % 2]),
        }
        book.observe("general|low", Mode.NGRAM_MOD, _measure(64, 1000.0, 14, 14), stats)
    return book


def test_a_mode_the_buckets_paired_samples_do_not_support_leaves_the_floor_alone() -> None:
    ups = _noisy_book((75, 30)).speedups("general|low")
    assert ups[Mode.NGRAM_SIMPLE] > ups[Mode.NGRAM_MOD] * 1.1  # the point prediction's pick

    def chosen(sigmas: float, passes: tuple[int, int]) -> Mode:
        policy = RouterPolicy(floor=Mode.NGRAM_MOD, predict_sigmas=sigmas)
        router = Router(policy, counterfactual=_noisy_book(passes))
        d = router.plan(RequestClass.GENERAL, "k", ALL)
        assert d.plan.route is Route.PREDICTED
        return d.plan.mode

    assert chosen(0.0, (75, 30)) is Mode.NGRAM_SIMPLE  # the point prediction alone
    assert chosen(1.0, (75, 30)) is Mode.NGRAM_MOD  # one request in two is slower
    assert chosen(1.0, (40, 42)) is Mode.NGRAM_SIMPLE  # faster on every request


def test_plan_routes_on_predictions_after_the_cache_and_before_the_probe() -> None:
    ready = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE]
    ups = {Mode.BASELINE: 1.0, Mode.NGRAM_SIMPLE: 1.1, Mode.NGRAM_MOD: 1.0, Mode.CASCADE: 1.6}
    policy = RouterPolicy(probe="always", floor=Mode.BASELINE)
    kw: dict[str, Any] = {"ready": ready, "speed": _no_speed, "policy": policy, "speedups": ups}
    plan = _route(RequestClass.GENERAL, **kw)
    assert (plan.route, plan.mode) == (Route.PREDICTED, Mode.CASCADE)
    assert _route(RequestClass.GENERAL, cached=Mode.NGRAM_SIMPLE, **kw).route is Route.CACHE
    edit = _route(RequestClass.EDIT, **kw)
    assert (edit.route, edit.mode) == (Route.PREDICTED, Mode.CASCADE)
    assert _route(RequestClass.UNSAFE, **kw).mode is Mode.BASELINE
    off_kw: dict[str, Any] = kw | {"policy": RouterPolicy(predict=False)}
    assert _route(RequestClass.GENERAL, **off_kw).route is Route.FALLBACK
    without: dict[str, Any] = kw | {"speedups": None}
    assert _route(RequestClass.GENERAL, **without).route is Route.PROBE


def test_router_feeds_routed_answers_and_only_mirrors_forced_ones() -> None:
    router = Router(RouterPolicy(), counterfactual=Counterfactual(SPEC, ALL))
    book = router.counterfactual
    assert book is not None
    gen = list(range(10, 74))
    forced = router.plan(RequestClass.GENERAL, "k0", ALL, forced=Mode.NGRAM_MOD)
    router.record(forced, Mode.NGRAM_MOD, None)
    forced.measurement = _measure(64, 1600.0)
    router.finish(forced, "done")
    router.observe(forced, Mode.NGRAM_MOD, [1, 2], gen, None)
    assert book.snapshot()["buckets"] == {}
    assert book.snapshot()["mirror_entries"]["ngram-mod"] > 0
    for i in range(MIN_BUCKET_SAMPLES):
        d = router.plan(RequestClass.GENERAL, f"k{i + 1}", ALL)
        assert d.plan.route is Route.FALLBACK and d.predicted == {}
        d.measurement = _measure(64, 1600.0)
        router.finish(d, "done")
        router.observe(d, Mode.NGRAM_MOD, [i + 5, i + 6], gen, None)
        assert d.counterfactual["baseline"] == pytest.approx(40.0)
    d = router.plan(RequestClass.GENERAL, "k9", ALL)
    assert d.plan.route is Route.PREDICTED
    assert d.predicted_tok_s is not None
    failed = router.plan(RequestClass.GENERAL, "k10", ALL)
    failed.measurement = _measure(64, 1600.0)
    router.finish(failed, "error", "boom")
    router.observe(failed, Mode.NGRAM_MOD, [1], gen, None)
    assert failed.counterfactual == {}


def test_a_book_of_one_replayable_mode_learns_from_nothing() -> None:
    # One mode served (``fronde serve --mode baseline``): nothing to compare it with, so
    # hindsight fetches no token ids for a routed answer either.
    alone = Router(RouterPolicy(), counterfactual=Counterfactual(SPEC, [Mode.BASELINE]))
    d = alone.plan(RequestClass.GENERAL, "k0", [Mode.BASELINE])
    d.measurement = _measure(64, 1600.0)
    assert not alone.learns_from(d, Mode.BASELINE)
    with_draft = Counterfactual(SPEC, [Mode.BASELINE, Mode.DRAFT])  # a draft is not replayed
    assert not Router(RouterPolicy(), counterfactual=with_draft).learns_from(d, Mode.BASELINE)
    both = Router(
        RouterPolicy(), counterfactual=Counterfactual(SPEC, [Mode.BASELINE, Mode.NGRAM_MOD])
    )
    assert both.learns_from(d, Mode.BASELINE)
    client = cast("BackendClient", None)  # never called: nothing is scheduled
    assert not Hindsight(client, alone).enabled  # no answer captured, no overlap computed
    assert Hindsight(client, both).enabled


def test_served_answers_are_replayed_and_later_ones_routed_on_the_prediction(
    fake_binary: Path, tmp_path: Path
) -> None:
    with serve(fake_binary, tmp_path) as c:
        wait_healthy(c)
        classes: list[str] = []
        for i in range(MIN_BUCKET_SAMPLES + 1):
            body = {"messages": [{"role": "user", "content": f"say {i}"}], "max_tokens": 40}
            if i % 2:
                body["stream"] = True
            r = c.post("/v1/chat/completions", json=body)
            assert r.status_code == 200
            classes.append(r.headers["x-fronde-class"])
            deadline = time.monotonic() + 10
            cf: dict[str, Any] = {}
            while time.monotonic() < deadline:  # the replay runs after the answer
                cf = c.get("/fronde/v1/router").json()["counterfactual"]
                if cf["buckets"].get("general|low", {}).get("samples", 0) > i:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"request {i} was never replayed: {cf}")
        assert classes[-1] == "predicted"
        state = c.get("/fronde/v1/router").json()
        last = state["recent"][-1]
        assert last["predicted_tok_s"] is not None
        assert set(last["counterfactual"]) >= {"baseline", "ngram-simple", "ngram-mod"}
        assert state["counterfactual"]["median_error"]["predicted"] is not None


def test_each_modes_own_pass_cost_is_reported_not_used() -> None:
    book = Counterfactual(SPEC, ALL)

    def gen(k: int) -> list[int]:  # fresh tokens each time: no mirror memory
        return list(range(1000 * k, 1000 * k + 64))

    for i in range(2):  # baseline: 25 ms a pass; ngram-mod: 30 ms a pass, same tokens
        stats = book.replay(Mode.BASELINE, [i], gen(2 * i), None)
        book.observe("b", Mode.BASELINE, _measure(64, 1600.0), stats)
        stats = book.replay(Mode.NGRAM_MOD, [i], gen(2 * i + 1), None)
        book.observe("b", Mode.NGRAM_MOD, _measure(64, 1920.0), stats)
    assert book.snapshot()["step_ms"] == pytest.approx({"baseline": 25.0, "ngram-mod": 30.0})
    stats = book.replay(Mode.BASELINE, [7], gen(9), None)
    obs = book.observe("b", Mode.BASELINE, _measure(64, 1600.0), stats)
    assert obs is not None
    # The served mode's pass time stands for every mode's (see the module docstring).
    assert obs.speed[Mode.NGRAM_MOD] == pytest.approx(40.0)


def test_a_baseline_with_flags_of_its_own_is_predicted_at_its_own_pass_time() -> None:
    fresh = list(range(10, 74))  # nothing to copy: every mode replays 64 plain passes
    for own in (False, True):
        book = Counterfactual(SPEC, ALL, own_baseline_step=own)
        assert book.seed_step(Mode.BASELINE, _measure(32, 600.0)) == pytest.approx(18.75)
        assert book.seed_step(Mode.NGRAM_MOD, _measure(32, 800.0)) == pytest.approx(25.0)
        untimed = Measurement(32, 100.0)  # no decode time reported: no seed
        assert book.seed_step(Mode.CASCADE, untimed) is None
        assert book.seed_step(Mode.CASCADE, _measure(8, 100.0)) is None  # too short
        # Served on ngram-mod at 25 ms a pass (64 tokens in 1.6 s): 40 tok/s there.
        stats = book.replay(Mode.NGRAM_MOD, [1, 2, 3], fresh, None)
        obs = book.observe("b", Mode.NGRAM_MOD, _measure(64, 1600.0), stats)
        assert obs is not None
        assert obs.speed[Mode.NGRAM_MOD] == pytest.approx(40.0)
        assert obs.speed[Mode.NGRAM_SIMPLE] == pytest.approx(40.0)  # a speculative pass
        # Baseline's pass is 18.75 ÷ 25 of the served one's when timed apart.
        assert obs.speed[Mode.BASELINE] == pytest.approx(40.0 / 0.75 if own else 40.0)
        # Served on baseline, the speculative modes are slower by the inverse.
        stats = book.replay(Mode.BASELINE, [4], list(range(100, 164)), None)
        obs = book.observe("b", Mode.BASELINE, _measure(64, 1200.0), stats)
        assert obs is not None
        # 18.75 ms a pass here, 25 ms on ngram-mod: 64 tokens in 1.6 s, 40 tok/s.
        assert obs.speed[Mode.NGRAM_MOD] == pytest.approx(40.0 if own else 64 / 1.2)
        # Baseline under load: its passes slow to 56 ms, ngram-mod's stay unseen. The
        # ratio stays the timed passes' (a stale EMA against a fresh one would cancel
        # the slowdown and predict ngram-mod at its unloaded 40 tok/s).
        for i in range(20):
            stats = book.replay(Mode.BASELINE, [i], list(range(200 + 64 * i, 264 + 64 * i)), None)
            obs = book.observe("b", Mode.BASELINE, _measure(64, 56 * 64.0), stats)
        assert obs is not None
        assert book.pass_ratio(Mode.NGRAM_MOD, Mode.BASELINE) == pytest.approx(
            25.0 / 18.75 if own else 1.0
        )
        assert obs.speed[Mode.NGRAM_MOD] == pytest.approx(
            1000 / (56 * 25.0 / 18.75) if own else 1000 / 56
        )
    # A mode never timed keeps the served mode's pass.
    book = Counterfactual(SPEC, ALL, own_baseline_step=True)
    book.seed_step(Mode.BASELINE, _measure(32, 600.0))
    assert book.pass_ratio(Mode.BASELINE, Mode.CASCADE) == 1.0


def test_serve_times_each_backends_pass_before_routing_when_baseline_has_flags_of_its_own(
    fake_binary: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # baseline decodes at 400 tok/s, the speculative fakes at 200 tok/s. The fake drafts
    # 2 tokens a generated one wherever a spec type is named (baseline's too): α 0 on
    # baseline, 0.25 on the others. A hung backend is left untimed after STEP_TIMEOUT_S.
    monkeypatch.setattr(compose, "STEP_TIMEOUT_S", 4.0)
    spec = ["--fake-tps", "200", "--fake-accept-rate", "0.25"]
    knobs = {
        Mode.BASELINE: ["--fake-tps", "400", "--fake-accept-rate", "0"],
        Mode.NGRAM_SIMPLE: spec,
        Mode.NGRAM_MOD: spec,
    }
    cost = 0.1

    def step(tps: float, alpha: float) -> float:  # ms a pass for 32 tokens, 64 drafted
        return 32 / tps * 1000 / (32 - round(64 * alpha) + cost * 64)

    timed = {"baseline": step(400, 0.0), "ngram-simple": step(200, 0.25)}
    cases: list[tuple[list[str], dict[Mode, list[str]], dict[str, float]]] = [
        ([], {}, {}),
        (["--backend-sampling"], {}, timed | {"ngram-mod": step(200, 0.25)}),
        (["--backend-sampling"], {Mode.NGRAM_MOD: [*spec, "--fake-hang"]}, timed),
    ]
    for k, (flags, faults, expected) in enumerate(cases):
        with serve(
            fake_binary,
            tmp_path / str(k),
            knobs | faults,
            backend={"plain_args": flags},
            router={"draft_cost": cost},
        ) as c:
            statuses: list[str] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:  # /health answers 200 once passes are timed
                try:
                    r = c.get("/health")
                except httpx.TransportError:
                    continue
                statuses.append(r.json()["status"])
                if r.status_code == 200:
                    break
                time.sleep(0.02)
            passes = c.get("/fronde/v1/router").json()["counterfactual"]["pass_ms"]
            assert statuses[-1] == "ok", statuses
            assert passes == pytest.approx(expected)
            if flags:  # held while the backends start, then while they are timed
                assert "starting" in statuses and "timing passes" in statuses
            else:
                assert "timing passes" not in statuses
