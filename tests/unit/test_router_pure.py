"""Pure router policy with numbers: classes, cache, EMA, collapse, quarantine, floor, load."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from fronde.evidence.measure import Measurements
from fronde.evidence.measurement import STALE_S, Measurement, measurement_from_timings
from fronde.modes import Mode
from fronde.router.cache import RouteCache, cache_key
from fronde.router.classify import RequestClass, classify
from fronde.router.plan import LoadRule, Plan, Route, RouterPolicy, Situation, SpeedFn
from fronde.router.policy import choose_floor, plan_route
from fronde.timings import Timings


def _route(cls: RequestClass, **at: Any) -> Plan:
    """``plan_route`` with the situation given as keywords (the tests' shorthand)."""
    return plan_route(cls, Situation(**at))


CODE = "```python\n" + "def f(x):\n    return x + 1\n" * 40 + "```"  # ~1 000 chars
JSON = "```json\n" + '{"id": 1, "name": "widget", "price": 9.5},\n' * 25 + "```"


def chat(text: str, **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], **extra}


# --- classify ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        f"Rename the function f to inc and add type hints.\n{CODE}",
        f"Fix the off-by-one bug:\n{CODE}",
        f"Corrige le bogue dans ce code :\n{CODE}",
        f"Mets à jour le prix du widget.\n{JSON}",
        f"Update the price to 10.\n{JSON}",
        f"METS À JOUR le prix du widget.\n{JSON}",  # any case, accents included
        f"RÉÉCRIVEZ cette fonction.\n{CODE}",
    ],
)
def test_large_block_plus_edit_verb_is_edit(text: str) -> None:
    assert classify(chat(text)) is RequestClass.EDIT


@pytest.mark.parametrize(
    "text",
    [
        f"Explain what this does.\n{CODE}",  # no edit verb
        "Fix the bug: ```python\ndef f(x): return x\n```",  # block too small
        "Write a Python module for statistics.",
        "Écris un essai sur la Loire.",
    ],
)
def test_other_requests_are_general(text: str) -> None:
    assert classify(chat(text)) is RequestClass.GENERAL


def test_edit_verb_inside_the_block_does_not_count() -> None:
    block = "```python\n" + "# fix this later\nx = 1\n" * 60 + "```"
    assert classify(chat(f"What does this print?\n{block}")) is RequestClass.GENERAL


def test_predicted_outputs_make_an_edit() -> None:
    body = chat("Say hi", prediction={"type": "content", "content": "hi"})
    assert classify(body) is RequestClass.EDIT


@pytest.mark.parametrize(
    "extra",
    [
        {"logprobs": True},
        {"top_logprobs": 3},
        {"grammar": 'root ::= "a"'},
        {"response_format": {"type": "json_object"}},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
    ],
)
def test_fields_speculation_must_not_touch_are_unsafe(extra: dict[str, object]) -> None:
    assert classify(chat(f"Fix it {CODE}", **extra)) is RequestClass.UNSAFE


def test_false_or_empty_unsafe_fields_do_not_count() -> None:
    assert classify(chat("hello", logprobs=False, tools=[], n=1)) is RequestClass.GENERAL


def test_completion_prompts_and_content_parts_are_read() -> None:
    assert classify({"prompt": f"Refactor this:\n{CODE}"}) is RequestClass.EDIT
    parts = [{"type": "text", "text": "Fix the bug"}, {"type": "text", "text": CODE}]
    assert classify({"messages": [{"role": "user", "content": parts}]}) is RequestClass.EDIT


# --- cache ------------------------------------------------------------------------


def test_cache_key_covers_what_decides_the_output() -> None:
    a = chat("hi", temperature=0, model="m")
    assert cache_key(a) == cache_key(dict(reversed(list(a.items()))))
    assert cache_key(a) != cache_key({**a, "temperature": 0.7})
    assert cache_key(a) != cache_key({**a, "seed": 1})
    assert cache_key(a) == cache_key({**a, "stream": True, "user": "x"})  # irrelevant fields
    schema = {"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}
    assert cache_key(a) != cache_key({**a, "response_format": schema})
    assert cache_key(a) != cache_key({**a, "grammar": 'root ::= "a"'})


def test_cache_lru_ttl_and_exclusion() -> None:
    c = RouteCache(max_entries=2, ttl_s=10)
    c.put("a", Mode.NGRAM_MOD, now=0)
    c.put("b", Mode.BASELINE, now=0)
    assert c.get("a", now=1) is Mode.NGRAM_MOD  # a is now the most recent
    c.put("c", Mode.NGRAM_SIMPLE, now=2)  # evicts b
    assert c.get("b", now=2) is None and len(c) == 2
    assert c.get("a", now=5, excluded={Mode.NGRAM_MOD}) is None  # quarantined: not served
    assert c.get("a", now=5) is Mode.NGRAM_MOD  # but kept
    assert c.get("a", now=11) is None and len(c) == 1  # expired and dropped
    assert c.forget_mode(Mode.NGRAM_SIMPLE) == 1 and len(c) == 0


# --- measurements -----------------------------------------------------------------


def test_alpha_and_tau_from_timings() -> None:
    m = measurement_from_timings(
        {
            "predicted_n": 100,
            "predicted_ms": 1250.0,
            "predicted_per_second": 80.0,
            "draft_n": 80,
            "draft_n_accepted": 60,
        }
    )
    # 100 tokens in 40 target passes; the counts are kept for the step rate.
    assert m == Measurement(100, 80.0, 0.75, 2.5, decode_ms=1250.0, drafted=80, accepted=60)
    # (40 passes + 0.2 × 80 drafted) ÷ 1.25 s
    assert m is not None and m.step_rate() == pytest.approx(44.8)
    plain = measurement_from_timings({"predicted_n": 10, "predicted_per_second": 40.0})
    assert plain == Measurement(10, 40.0, None, None)
    assert plain is not None and plain.step_rate() == 40.0  # nothing drafted: decode tok/s
    assert measurement_from_timings({"predicted_n": 3}) is None


def test_ema_per_mode_and_class() -> None:
    ms = Measurements(ema_alpha=0.3)
    for tps in (100.0, 50.0):
        ms.record(Mode.NGRAM_MOD, "general", Measurement(64, tps), now=0)
    assert ms.speed(Mode.NGRAM_MOD) == pytest.approx(0.3 * 50 + 0.7 * 100)
    assert ms.speed(Mode.NGRAM_MOD, "general") == pytest.approx(85.0)
    assert ms.speed(Mode.NGRAM_MOD, "edit") is None
    ms.record(Mode.NGRAM_MOD, "general", Measurement(4, 1.0), now=0)  # too short: ignored
    assert ms.speed(Mode.NGRAM_MOD) == pytest.approx(85.0)


def test_collapse_quarantines_then_probation_until_reprobed() -> None:
    ms = Measurements(quarantine_s=120)
    for _ in range(3):
        assert not ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 100.0), now=0)
    assert not ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 51.0), now=1)  # ≥ 0.5×EMA
    ema = ms.speed(Mode.NGRAM_MOD)
    assert ema is not None
    # One low sample is a strike, not a quarantine; two in a row are.
    assert not ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 0.49 * ema), now=2)
    assert not ms.quarantined(Mode.NGRAM_MOD, now=2)
    assert ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 0.49 * ema), now=2)
    assert ms.speed(Mode.NGRAM_MOD) == ema  # the collapsed samples are not folded in
    assert ms.quarantined(Mode.NGRAM_MOD, now=100)
    assert ms.unavailable(now=100) == {Mode.NGRAM_MOD}
    assert not ms.quarantined(Mode.NGRAM_MOD, now=122.5)  # expired...
    assert ms.on_probation(Mode.NGRAM_MOD, now=122.5)  # ...but no traffic before a probe
    ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 90.0), now=123)  # the re-probe
    assert ms.unavailable(now=123) == set()
    assert ms.snapshot(now=123)["ngram-mod"]["collapses"] == 1


def test_a_strike_is_forgotten_after_a_normal_sample() -> None:
    ms = Measurements()
    for _ in range(3):
        ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 100.0), now=0)
    for t in range(6):  # low, normal, low, normal...: never two in a row
        tps = 10.0 if t % 2 == 0 else 100.0
        assert not ms.record(Mode.NGRAM_MOD, "general", Measurement(64, tps), now=t)
    assert not ms.quarantined(Mode.NGRAM_MOD, now=6)


def test_one_noisy_sample_never_sets_a_floor() -> None:
    """Issue 17, case 7: baseline's EMA at 1.3 tok/s (one busy moment) made ngram-mod
    the floor at 3 tok/s while baseline's requests ran at 37-42."""
    from fronde.router.engine import Router

    r = Router(ORIGINAL)
    ms = r.measurements
    ms.record(Mode.BASELINE, "general", Measurement(64, 1.3), now=0)
    for _ in range(3):
        ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 3.0), now=0)
    assert ms.trusted_speed(Mode.BASELINE, "general", now=1) is None  # one sample: untrusted
    plan = r.plan(RequestClass.GENERAL, "k", ALL, now=1.0).plan
    # The floor stays baseline and is measured again (no speed: the floor probes too).
    assert (plan.floor, plan.floor_tok_s) == (Mode.BASELINE, None)
    for _ in range(2):
        ms.record(Mode.BASELINE, "general", Measurement(64, 40.0), now=2)
    assert ms.trusted_speed(Mode.BASELINE, "general", now=3) == 40.0  # median, not EMA
    assert (ms.speed(Mode.BASELINE, "general") or 0) < 25  # the EMA still remembers 1.3
    plan = r.plan(RequestClass.GENERAL, "k", ALL, now=3.0).plan
    assert (plan.floor, plan.floor_tok_s) == (Mode.BASELINE, 40.0)


def test_speeds_go_stale_and_are_measured_again() -> None:
    ms = Measurements()
    for _ in range(3):
        ms.record(Mode.BASELINE, "general", Measurement(64, 40.0), now=0)
    assert ms.trusted_speed(Mode.BASELINE, "general", now=STALE_S) == 40.0
    assert ms.trusted_speed(Mode.BASELINE, "general", now=STALE_S + 1) is None


def test_no_collapse_without_history() -> None:
    ms = Measurements()
    ms.record(Mode.BASELINE, "general", Measurement(64, 100.0), now=0)
    assert not ms.record(Mode.BASELINE, "general", Measurement(64, 10.0), now=1)


# --- policy -----------------------------------------------------------------------

ALL = {Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD}
POLICY = RouterPolicy()
ORIGINAL = RouterPolicy(floor=Mode.BASELINE, probe="always", predict=False)
"""The original FRONDE router's policy: floors start at baseline, every candidate is probed."""


def speeds(table: dict[tuple[Mode, str], float]) -> SpeedFn:
    def lookup(mode: Mode, cls: str) -> float | None:
        return table.get((mode, str(cls)))

    return lookup


def test_floor_starts_at_the_policy_floor_until_a_candidate_beats_it_by_the_margin() -> None:
    none = speeds({})
    assert POLICY.floor is Mode.NGRAM_MOD  # the default: no assumption that baseline wins
    assert choose_floor("general", ALL, none, POLICY) is Mode.NGRAM_MOD
    measured = speeds(
        {
            (Mode.BASELINE, "general"): 40.0,
            (Mode.NGRAM_SIMPLE, "general"): 65.0,  # 1.08 × the floor: below the margin
            (Mode.NGRAM_MOD, "general"): 60.0,
        }
    )
    assert choose_floor("general", ALL, measured, POLICY) is Mode.NGRAM_MOD
    beaten = speeds({(Mode.NGRAM_SIMPLE, "general"): 67.0, (Mode.NGRAM_MOD, "general"): 60.0})
    assert choose_floor("general", ALL, beaten, POLICY) is Mode.NGRAM_SIMPLE  # ≥ 1.10 × 60
    assert choose_floor("edit", ALL, beaten, POLICY) is Mode.NGRAM_MOD  # per class
    # Without the floor's backend: baseline, then the first usable candidate.
    assert choose_floor("general", {Mode.BASELINE, Mode.NGRAM_SIMPLE}, none, POLICY) is (
        Mode.BASELINE
    )
    assert choose_floor("general", {Mode.NGRAM_SIMPLE}, none, POLICY) is Mode.NGRAM_SIMPLE
    # The original policy starts at baseline; a candidate must beat it by the margin.
    assert choose_floor("general", ALL, none, ORIGINAL) is Mode.BASELINE
    assert choose_floor("general", ALL, measured, ORIGINAL) is Mode.NGRAM_SIMPLE  # 65 > 60
    slow = speeds({(Mode.BASELINE, "general"): 40.0, (Mode.NGRAM_MOD, "general"): 43.0})
    assert choose_floor("general", ALL, slow, ORIGINAL) is Mode.BASELINE  # 1.075 × baseline


def test_rule_order() -> None:
    s = speeds({(Mode.BASELINE, "general"): 40.0})
    route = partial(_route, ready=ALL, speed=s, policy=ORIGINAL)
    assert route(RequestClass.EDIT, forced=Mode.BASELINE) == Plan(Route.FORCED, Mode.BASELINE)
    assert route(RequestClass.UNSAFE, cached=Mode.NGRAM_MOD) == Plan(Route.UNSAFE, Mode.BASELINE)
    assert route(RequestClass.EDIT, cached=Mode.BASELINE) == Plan(Route.EDIT, Mode.NGRAM_MOD)
    assert route(RequestClass.GENERAL, cached=Mode.NGRAM_SIMPLE) == Plan(
        Route.CACHE, Mode.NGRAM_SIMPLE
    )
    assert route(RequestClass.GENERAL) == Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE, 40.0)


def test_first_time_probe_has_no_floor_speed() -> None:
    p = _route(RequestClass.GENERAL, ready=ALL, speed=speeds({}), policy=ORIGINAL)
    assert p == Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE, None)


def test_quarantine_and_probation() -> None:
    route = partial(_route, ready=ALL, speed=speeds({}), policy=POLICY)
    # ngram-mod quarantined: the next aggressive candidate is probed.
    p = route(RequestClass.GENERAL, quarantined={Mode.NGRAM_MOD})
    assert (p.route, p.mode) == (Route.PROBE, Mode.NGRAM_SIMPLE)
    # An edit cannot go to a quarantined ngram-mod: fallback to the floor.
    assert route(RequestClass.EDIT, quarantined={Mode.NGRAM_MOD}) == Plan(
        Route.FALLBACK, Mode.BASELINE
    )
    # The cache does not serve a mode on probation; the mode is probed instead.
    p = route(RequestClass.GENERAL, cached=Mode.NGRAM_MOD, probation={Mode.NGRAM_MOD})
    assert (p.route, p.mode) == (Route.PROBE, Mode.NGRAM_MOD)
    # Nothing to probe: fallback to the floor.
    both = {Mode.NGRAM_MOD, Mode.NGRAM_SIMPLE}
    assert route(RequestClass.GENERAL, quarantined=both) == Plan(Route.FALLBACK, Mode.BASELINE)


def test_spread_rule_drops_to_an_idle_baseline() -> None:
    spread = RouterPolicy(load_rule="spread")
    route = partial(_route, ready=ALL, speed=speeds({}), policy=spread)
    assert route(RequestClass.GENERAL, busy={Mode.NGRAM_MOD}) == Plan(Route.FALLBACK, Mode.BASELINE)
    assert route(RequestClass.EDIT, busy={Mode.NGRAM_MOD}) == Plan(Route.FALLBACK, Mode.BASELINE)
    p = route(RequestClass.EDIT, busy={Mode.NGRAM_MOD, Mode.BASELINE})
    assert p == Plan(Route.FALLBACK, Mode.NGRAM_SIMPLE)
    p = route(RequestClass.EDIT, busy=ALL)  # everyone busy: queue where planned
    assert p == Plan(Route.EDIT, Mode.NGRAM_MOD)


def test_router_engine_load_rules() -> None:
    from fronde.router.engine import Router

    expected: dict[LoadRule, Plan] = {
        "serialize": Plan(Route.FALLBACK, Mode.NGRAM_MOD),  # queue on the decoding backend
        "spread": Plan(Route.FALLBACK, Mode.BASELINE),  # go to the idle baseline
        "off": Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE, None),
    }
    for rule, plan in expected.items():
        r = Router(RouterPolicy(load_rule=rule, floor=Mode.BASELINE, probe="always"))
        r.in_flight[Mode.NGRAM_MOD] += 1  # the candidate's only slot is taken
        assert r.plan(RequestClass.GENERAL, "k", ALL, now=0.0).plan == plan, rule


def test_serialize_keeps_everything_on_the_decoding_backend() -> None:
    route = partial(_route, ready=ALL, speed=speeds({}), policy=ORIGINAL)
    active = {Mode.BASELINE}
    assert route(RequestClass.GENERAL, active=active) == Plan(Route.FALLBACK, Mode.BASELINE)
    assert route(RequestClass.EDIT, active=active) == Plan(Route.FALLBACK, Mode.BASELINE)
    # Forced and unsafe requests keep their mode: correctness over throughput.
    assert route(RequestClass.GENERAL, forced=Mode.NGRAM_MOD, active=active).route is Route.FORCED
    assert route(RequestClass.UNSAFE, active={Mode.NGRAM_MOD}).mode is Mode.BASELINE
    # Nothing in flight: the ordinary rules.
    assert route(RequestClass.GENERAL).route is Route.PROBE


def test_unsafe_requests_never_go_to_a_speculative_mode() -> None:
    """Issue 17, case 6: a quarantined, busy or absent baseline moves nothing."""
    fast = speeds({(m, "unsafe-for-spec"): 100.0 for m in ALL})
    for rule in ("serialize", "spread", "off"):
        route = partial(_route, ready=ALL, speed=fast, policy=RouterPolicy(load_rule=rule))
        base = Plan(Route.UNSAFE, Mode.BASELINE)
        assert route(RequestClass.UNSAFE, quarantined={Mode.BASELINE}) == base
        assert route(RequestClass.UNSAFE, probation={Mode.BASELINE}) == base
        assert route(RequestClass.UNSAFE, busy={Mode.BASELINE}) == base
        assert route(RequestClass.UNSAFE, active={Mode.NGRAM_SIMPLE}) == base
        no_baseline = {Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD}
        assert route(RequestClass.UNSAFE, ready=no_baseline) == base
        assert route(RequestClass.UNSAFE, forced=Mode.NGRAM_MOD) == base  # not even forced


def test_router_engine_records_and_quarantines_via_timings() -> None:
    from fronde.router.engine import Router

    r = Router()
    d = r.plan(RequestClass.GENERAL, "k", ALL, now=0.0)
    for _ in range(3):
        r.record(d, Mode.NGRAM_MOD, Timings(64, 100.0), now=0.0)
    r.cache.put("k", Mode.NGRAM_MOD, now=0.0)
    for _ in range(2):  # two collapsed samples in a row
        r.record(d, Mode.NGRAM_MOD, Timings(64, 10.0), now=1.0)
    assert r.measurements.quarantined(Mode.NGRAM_MOD, now=2.0)
    assert len(r.cache) == 0  # entries pointing at the collapsed mode were dropped
    snap = r.snapshot(now=2.0)
    assert snap["modes"]["ngram-mod"]["quarantined_for_s"] == pytest.approx(119.0)


def test_forced_requests_are_reported_but_do_not_feed_the_emas() -> None:
    from fronde.router.engine import Router

    r = Router(ORIGINAL)
    d = r.plan(RequestClass.GENERAL, "k", ALL, forced=Mode.NGRAM_MOD, now=0.0)
    r.record(d, Mode.NGRAM_MOD, Timings(64, 100.0, draft_n=40, draft_n_accepted=30), now=0.0)
    assert d.decode_tok_s == 100.0 and d.alpha == 0.75  # visible in /fronde/v1/router
    assert r.measurements.speed(Mode.NGRAM_MOD) is None
    assert r.measurements.speed(Mode.NGRAM_MOD, "general") is None
    # So the next routed request of the class still probes.
    assert r.plan(RequestClass.GENERAL, "k2", ALL, now=0.0).plan.route is Route.PROBE


def test_a_hand_over_must_repay_the_floors_prefill() -> None:
    from fronde.router.policy import hand_over_pays

    # 16 tokens left, 40 → 45 tok/s: saves 0.044 s; prefilling 100 tokens at 500 tok/s
    # costs 0.2 s. Stay on the probed backend.
    assert not hand_over_pays(16, 100, 40.0, 45.0, 500.0)
    # 500 tokens left: saves 1.39 s, more than the 0.2 s prefill.
    assert hand_over_pays(500, 100, 40.0, 45.0, 500.0)
    # Unknown budget or prefill speed: hand over, as the margin says.
    assert hand_over_pays(None, 100, 40.0, 45.0, 500.0)
    assert hand_over_pays(16, 100, 40.0, 45.0, None)
    # A floor that is not faster is never worth a prefill.
    assert not hand_over_pays(500, 100, 45.0, 44.0, 500.0)
