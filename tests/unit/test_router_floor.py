"""The router's starting floor, its probe policy, the step-rate collapse rule, the
measured floor (fronde.evidence.calibration) and the cascade mode, with numbers."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from fronde.config import Settings, load_settings
from fronde.config_router import RouterSettings
from fronde.errors import ConfigError
from fronde.evidence import calibration
from fronde.evidence.calibration import (
    FALLBACK_FLOOR,
    FLOORS_FILE,
    Floor,
    calibration_key,
    load_draft_costs,
    load_floor,
    resolve_floor,
    save_floor,
)
from fronde.evidence.measure import Measurements
from fronde.evidence.measurement import Measurement
from fronde.modes import Mode, SpeculationSettings, mode_args
from fronde.router.building import build_router
from fronde.router.classify import RequestClass, constrained
from fronde.router.engine import Router
from fronde.router.plan import Plan, Route, RouterPolicy, Situation, SpeedFn
from fronde.router.policy import choose_floor, plan_route, probe_allowed
from fronde.timings import Timings


def _route(cls: RequestClass, **at: Any) -> Plan:
    """``plan_route`` with the situation given as keywords (the tests' shorthand)."""
    return plan_route(cls, Situation(**at))


ROOT = Path(__file__).resolve().parents[2]
ALL = {Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE}
GENERAL = RequestClass.GENERAL


def speeds(table: dict[Mode, float], cls: str = "general") -> SpeedFn:
    """A trusted-speed lookup that knows ``table`` for class ``cls`` and nothing else."""

    def lookup(mode: Mode, c: str) -> float | None:
        return table.get(mode) if str(c) == cls else None

    return lookup


UNMEASURED = speeds({})


# --- probe policy -------------------------------------------------------------------


def test_probe_allowed_by_policy_budget_and_measurement() -> None:
    auto = RouterPolicy()
    assert (auto.probe, auto.probe_min_tokens) == ("auto", 512)
    assert probe_allowed(auto, None, None)  # an open budget, an unmeasured candidate
    assert probe_allowed(auto, 512, None) and probe_allowed(auto, 1024, None)
    assert not probe_allowed(auto, 511, None)
    assert not probe_allowed(auto, 64, None)  # a short answer cannot repay a hand-over
    assert not probe_allowed(auto, None, 80.0)  # measured: nothing left to learn
    assert not probe_allowed(RouterPolicy(probe_min_tokens=2000), 1024, None)
    never = RouterPolicy(probe="never")
    assert not any(probe_allowed(never, b, None) for b in (None, 64, 100_000))
    always = RouterPolicy(probe="always")
    assert probe_allowed(always, 64, None) and probe_allowed(always, 64, 80.0)


def test_auto_probes_only_long_or_open_budgets_of_an_unmeasured_candidate() -> None:
    # A measured floor of ngram-simple (as `fronde bench verdict` may save): the
    # preferred candidate, ngram-mod, differs from it.
    policy = RouterPolicy(floor=Mode.NGRAM_SIMPLE)

    def route(budget: int | None, speed: SpeedFn = UNMEASURED, p: RouterPolicy = policy) -> Plan:
        return _route(GENERAL, ready=ALL, speed=speed, policy=p, budget=budget)

    assert route(64) == Plan(Route.FALLBACK, Mode.NGRAM_SIMPLE)
    probe = Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.NGRAM_SIMPLE, None)
    assert route(None) == probe
    assert route(1024) == probe
    # ngram-mod measured for the class (and below the margin, so simple stays the floor).
    measured = speeds({Mode.NGRAM_SIMPLE: 48.0, Mode.NGRAM_MOD: 50.0})
    assert route(1024, measured) == Plan(Route.FALLBACK, Mode.NGRAM_SIMPLE)
    assert route(None, measured) == Plan(Route.FALLBACK, Mode.NGRAM_SIMPLE)
    never = RouterPolicy(floor=Mode.NGRAM_SIMPLE, probe="never")
    for budget in (None, 64, 1024):
        assert route(budget, p=never) == Plan(Route.FALLBACK, Mode.NGRAM_SIMPLE)
    always = RouterPolicy(floor=Mode.NGRAM_SIMPLE, probe="always")
    assert route(64, p=always) == probe
    assert route(64, measured, always) == Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.NGRAM_SIMPLE, 48.0)


def test_with_the_default_floor_the_preferred_candidate_is_the_floor() -> None:
    """ngram-mod is both the default floor and the first aggressive mode: no probe, even
    for an open budget; cascade is probed only while ngram-mod is quarantined."""
    default = RouterPolicy()
    assert (default.floor, default.aggressive[0]) == (Mode.NGRAM_MOD, Mode.NGRAM_MOD)
    for budget in (None, 64, 1024):
        plan = _route(GENERAL, ready=ALL, speed=UNMEASURED, policy=default, budget=budget)
        assert plan == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    out = _route(GENERAL, ready=ALL, speed=UNMEASURED, policy=default, quarantined={Mode.NGRAM_MOD})
    assert out == Plan(Route.PROBE, Mode.CASCADE, Mode.BASELINE, None)


def test_router_plan_passes_the_budget_to_the_probe_policy() -> None:
    r = Router(RouterPolicy(floor=Mode.BASELINE))
    assert r.plan(GENERAL, "short", ALL, now=0.0, budget=64).plan == Plan(
        Route.FALLBACK, Mode.BASELINE
    )
    assert r.plan(GENERAL, "open", ALL, now=0.0).plan == Plan(
        Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE, None
    )
    assert r.plan(GENERAL, "long", ALL, now=0.0, budget=4096).plan.route is Route.PROBE


def test_an_expired_quarantine_holds_probation_only_when_probes_always_run() -> None:
    def collapsed(policy: RouterPolicy) -> Router:
        r = Router(policy)
        d = r.plan(GENERAL, "k", ALL, now=0.0)
        for _ in range(3):
            r.record(d, Mode.NGRAM_MOD, Timings(64, 100.0), now=0.0)
        for _ in range(2):
            r.record(d, Mode.NGRAM_MOD, Timings(64, 10.0), now=1.0)
        assert r.measurements.quarantined(Mode.NGRAM_MOD, now=2.0)
        r.cache.put("k", Mode.NGRAM_MOD, now=200.0)
        assert r.measurements.on_probation(Mode.NGRAM_MOD, now=200.0)
        return r

    # probe = "auto": the quarantine simply ends and ngram-mod serves again.
    r = collapsed(RouterPolicy())
    assert r.plan(GENERAL, "k", ALL, now=200.0).plan == Plan(Route.CACHE, Mode.NGRAM_MOD)
    assert r.plan(GENERAL, "new", ALL, now=200.0).plan == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # probe = "always": no traffic before a probe has measured it again.
    r = collapsed(RouterPolicy(floor=Mode.BASELINE, probe="always"))
    plan = r.plan(GENERAL, "k", ALL, now=200.0).plan
    assert (plan.route, plan.mode, plan.floor) == (Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE)


# --- the starting floor -------------------------------------------------------------


def test_the_floor_starts_at_the_policy_floor_and_moves_only_past_the_margin() -> None:
    policy = RouterPolicy()
    assert (policy.floor, policy.margin) == (Mode.NGRAM_MOD, 1.10)
    assert choose_floor("general", ALL, UNMEASURED, policy) is Mode.NGRAM_MOD
    tie = speeds({Mode.NGRAM_MOD: 100.0, Mode.NGRAM_SIMPLE: 105.0})  # 1.05 ×
    assert choose_floor("general", ALL, tie, policy) is Mode.NGRAM_MOD
    beaten = speeds({Mode.NGRAM_MOD: 100.0, Mode.NGRAM_SIMPLE: 120.0})  # 1.2 ×
    assert choose_floor("general", ALL, beaten, policy) is Mode.NGRAM_SIMPLE
    assert choose_floor("edit", ALL, beaten, policy) is Mode.NGRAM_MOD  # per class
    # The fastest of those past the margin wins.
    two = speeds({Mode.NGRAM_MOD: 100.0, Mode.NGRAM_SIMPLE: 120.0, Mode.CASCADE: 130.0})
    assert choose_floor("general", ALL, two, policy) is Mode.CASCADE
    # A floor with no trusted speed has nothing to be compared with: it stays.
    lone = speeds({Mode.NGRAM_SIMPLE: 999.0})
    assert choose_floor("general", ALL, lone, policy) is Mode.NGRAM_MOD
    # Baseline is no floor candidate: it does not replace a speculative floor.
    plain = speeds({Mode.NGRAM_MOD: 100.0, Mode.BASELINE: 150.0})
    assert Mode.BASELINE not in policy.floor_candidates
    assert choose_floor("general", ALL, plain, policy) is Mode.NGRAM_MOD


def test_without_the_floor_modes_backend_baseline_starts() -> None:
    policy = RouterPolicy()
    usable = {Mode.BASELINE, Mode.NGRAM_SIMPLE}
    assert choose_floor("general", usable, UNMEASURED, policy) is Mode.BASELINE
    # The margin now applies against baseline.
    close = speeds({Mode.BASELINE: 100.0, Mode.NGRAM_SIMPLE: 105.0})
    assert choose_floor("general", usable, close, policy) is Mode.BASELINE
    far = speeds({Mode.BASELINE: 100.0, Mode.NGRAM_SIMPLE: 120.0})
    assert choose_floor("general", usable, far, policy) is Mode.NGRAM_SIMPLE
    # No baseline either: the first usable floor candidate.
    assert choose_floor("general", {Mode.CASCADE, Mode.NGRAM_SIMPLE}, UNMEASURED, policy) is (
        Mode.NGRAM_SIMPLE
    )
    # A quarantined floor is not usable: its class falls back to baseline.
    plan = _route(
        RequestClass.EDIT, ready=ALL, speed=UNMEASURED, policy=policy, quarantined={Mode.NGRAM_MOD}
    )
    assert plan == Plan(Route.FALLBACK, Mode.BASELINE)
    with pytest.raises(ValueError, match="no usable mode"):
        choose_floor("general", set(), UNMEASURED, policy)


# --- collapse: a fault of the server, not a change of content ------------------------


def copy_heavy(decode_ms: float) -> Measurement:
    """128 tokens, 100 of them accepted out of 110 drafted, decoded in ``decode_ms``."""
    return Measurement(
        128, 128 / decode_ms * 1000, 100 / 110, 128 / 28, decode_ms, drafted=110, accepted=100
    )


def undrafted(tok_s: float) -> Measurement:
    """128 tokens at ``tok_s`` with nothing drafted (nothing to copy)."""
    return Measurement(128, tok_s, None, None, 128 / tok_s * 1000)


FAST_MS = 128 / 1500 * 1000  # copy-heavy samples at 1500 tok/s


def test_nothing_to_copy_after_copy_heavy_edits_is_no_collapse() -> None:
    ms = Measurements()
    for t in range(3):
        assert not ms.record(Mode.NGRAM_MOD, "general", copy_heavy(FAST_MS), now=t)
    # (28 passes + 0.2 × 110 drafted) ÷ 85.3 ms = 586 target passes a second.
    assert copy_heavy(FAST_MS).step_rate() == pytest.approx(586.0, abs=0.5)
    # The old rule, decode tok/s against its EMA, would call 570 tok/s a collapse.
    assert (ms.speed(Mode.NGRAM_MOD) or 0) * 0.5 > 570
    assert undrafted(570).step_rate() == pytest.approx(570)
    for t in (3, 4):
        assert not ms.record(Mode.NGRAM_MOD, "general", undrafted(570), now=t)
    assert not ms.quarantined(Mode.NGRAM_MOD, now=5)
    assert ms.snapshot(now=5)["ngram-mod"]["collapses"] == 0
    # Both samples were folded in (decode tok/s EMA: 1500 → 1221 → 1026).
    assert ms.speed(Mode.NGRAM_MOD) == pytest.approx(0.7 * (0.7 * 1500 + 0.3 * 570) + 0.3 * 570)


def test_a_slow_server_collapses_on_the_second_low_step_rate() -> None:
    ms = Measurements()
    for t in range(3):
        ms.record(Mode.NGRAM_MOD, "general", copy_heavy(FAST_MS), now=t)
    slow = copy_heavy(5 * FAST_MS)  # the same tokens at 5× the decode time
    assert slow.step_rate() < 0.5 * copy_heavy(FAST_MS).step_rate()
    assert not ms.record(Mode.NGRAM_MOD, "general", slow, now=3)  # a strike
    assert not ms.quarantined(Mode.NGRAM_MOD, now=3)
    assert ms.record(Mode.NGRAM_MOD, "general", slow, now=4)  # the second: quarantine
    assert ms.quarantined(Mode.NGRAM_MOD, now=5)
    assert ms.snapshot(now=5)["ngram-mod"]["step_rate_ema"] == pytest.approx(
        copy_heavy(FAST_MS).step_rate()
    )


def test_a_generation_held_to_a_grammar_is_no_collapse_and_leaves_the_emas() -> None:
    """A JSON schema slows every step by its grammar's cost: on the 2-core CPU two such
    answers in a row (4-6 tok/s against an EMA of 20-60) quarantined ngram-mod, and the
    prompt-hash cache then could not send a repeat there."""
    ms = Measurements()
    for t in range(3):
        ms.record(Mode.NGRAM_MOD, "general", copy_heavy(FAST_MS), now=t)
    before = ms.snapshot(now=6)["ngram-mod"]
    slow = copy_heavy(5 * FAST_MS)
    for t in (3, 4, 5):
        assert not ms.record(Mode.NGRAM_MOD, "general", slow, now=t, judged=False)
    assert not ms.quarantined(Mode.NGRAM_MOD, now=6)
    assert ms.snapshot(now=6)["ngram-mod"] == before  # no strike, nothing folded in
    # Judged, the same samples are a collapse (the rule is unchanged for the rest).
    assert not ms.record(Mode.NGRAM_MOD, "general", slow, now=6)
    assert ms.record(Mode.NGRAM_MOD, "general", slow, now=7)


def test_the_router_tells_a_constrained_request_from_its_body() -> None:
    schema = {"type": "object"}
    assert constrained({"grammar": 'root ::= "a"'})
    assert constrained({"json_schema": schema})
    assert constrained({"response_format": {"type": "json_schema", "json_schema": schema}})
    assert constrained({"response_format": {"type": "json_object"}})
    assert not constrained({"response_format": {"type": "text"}})
    assert not constrained({"messages": [], "grammar": ""})


# The H200 run's baseline samples in order (results/load-gpu-h200-cpu-gemma-270m-20261203-c32b,
# router-b, repetition 2): one request decoded before the other 31 joined, the rest with them.
BATCHED = [(64, 761.0), (23, 48.0), (41, 62.0), (64, 62.0), (64, 62.0), (64, 62.0), (64, 64.0)]


def test_with_parallel_slots_a_batched_request_is_no_collapse() -> None:
    def quarantined(alone: bool) -> bool:
        ms = Measurements(alone=alone)
        for t, (n, tok_s) in enumerate(BATCHED):
            ms.record(
                Mode.BASELINE, "general", Measurement(n, tok_s, None, None, n / tok_s * 1000), t
            )
        return ms.quarantined(Mode.BASELINE, now=len(BATCHED))

    # One at a time, the same numbers would be a collapse (the rule is unchanged there) …
    assert quarantined(alone=True)
    # … but a request's speed in a shared batch is the batch's: every sample is folded in.
    assert not quarantined(alone=False)


def test_collapses_are_judged_only_behind_a_decode_gate_of_one() -> None:
    from fronde.config_sections import BackendSettings
    from fronde.router.building import measurements_from

    assert measurements_from(Settings()).alone  # CPU default: one slot, the gate
    slots = Settings(backend=BackendSettings(parallel=32))
    assert not measurements_from(slots).alone
    gated = Settings(
        backend=BackendSettings(parallel=32), router=RouterSettings(max_parallel_decodes=1)
    )
    assert measurements_from(gated).alone
    # A router built without a book gets the same rule from its gate.
    assert Router().measurements.alone
    parallel = Router(slots=32, max_parallel_decodes=128)
    assert not parallel.measurements.alone
    # /fronde/v1/router says which.
    assert Router().snapshot(now=0.0)["policy"]["collapses_judged"] is True
    assert parallel.snapshot(now=0.0)["policy"]["collapses_judged"] is False


def test_the_step_rate_weighs_drafts_by_draft_cost() -> None:
    m = copy_heavy(FAST_MS)
    seconds = FAST_MS / 1000
    assert m.step_rate(0.0) == pytest.approx(28 / seconds)
    assert m.step_rate(1.0) == pytest.approx((28 + 110) / seconds)
    assert Measurement(64, 40.0, drafted=10, accepted=5).step_rate() == 40.0  # no decode_ms
    # draft_cost reaches the EMA book from the settings.
    from fronde.router.building import measurements_from

    assert measurements_from(Settings(router=RouterSettings(draft_cost=0.025))).draft_cost == 0.025


# --- the measured floor -------------------------------------------------------------


def test_save_floor_keeps_the_fastest_and_load_floor_reads_it_back(tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # not created yet: save_floor makes it
    rates = {Mode.BASELINE: 40.0, Mode.NGRAM_MOD: 55.5, Mode.CASCADE: 52.0}
    assert save_floor(cache, "b1|m.gguf|2cpu", rates, "runs/verdict-1") is Mode.NGRAM_MOD
    assert load_floor(cache, "b1|m.gguf|2cpu") is Mode.NGRAM_MOD
    assert load_floor(cache, "b1|m.gguf|16cpu") is None  # another machine
    assert save_floor(cache, "b2|m.gguf|2cpu", {Mode.CASCADE: 9.0}, "runs/verdict-2") is (
        Mode.CASCADE
    )
    data = json.loads((cache / FLOORS_FILE).read_text())
    assert set(data) == {"b1|m.gguf|2cpu", "b2|m.gguf|2cpu"}  # one key does not drop another
    entry = data["b1|m.gguf|2cpu"]
    assert (entry["mode"], entry["source"]) == ("ngram-mod", "runs/verdict-1")
    assert entry["rates"] == {"baseline": 40.0, "ngram-mod": 55.5, "cascade": 52.0}
    # A later verdict for the same key replaces the record.
    save_floor(cache, "b1|m.gguf|2cpu", {Mode.NGRAM_SIMPLE: 70.0, Mode.NGRAM_MOD: 60.0}, "r3")
    assert load_floor(cache, "b1|m.gguf|2cpu") is Mode.NGRAM_SIMPLE
    with pytest.raises(ValueError, match="no rate"):
        save_floor(cache, "k", {}, "r")


def test_load_floor_ignores_a_missing_or_broken_file(tmp_path: Path) -> None:
    assert load_floor(tmp_path, "k") is None
    (tmp_path / FLOORS_FILE).write_text("{not json")
    assert load_floor(tmp_path, "k") is None
    (tmp_path / FLOORS_FILE).write_text(json.dumps({"k": {"mode": "turbo"}, "j": "cascade"}))
    assert load_floor(tmp_path, "k") is None and load_floor(tmp_path, "j") is None


def settings_in(tmp_path: Path, floor: str = "auto") -> Settings:
    return load_settings(cache_dir=tmp_path, models_dir=tmp_path, router={"floor": floor})


def test_resolve_floor_auto_takes_the_measured_floor_else_ngram_mod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "b11434-cpu-x|gemma.gguf|2cpu"

    def fixed_key(settings: Settings) -> str:
        return key

    monkeypatch.setattr(calibration, "calibration_key", fixed_key)
    settings = settings_in(tmp_path)
    floor = resolve_floor(settings)
    assert floor.mode is FALLBACK_FLOOR is Mode.NGRAM_MOD
    assert floor.why.startswith("ngram-mod: default, nothing measured for " + key)
    assert "fronde bench verdict" in floor.why
    save_floor(tmp_path, key, {Mode.CASCADE: 60.0, Mode.NGRAM_MOD: 50.0}, "runs/v")
    floor = resolve_floor(settings)
    assert floor.mode is Mode.CASCADE and key in floor.why and "fastest" in floor.why
    # The router starts every class there and says why.
    r = build_router(settings)
    assert r.policy.floor is Mode.CASCADE
    assert r.snapshot(now=0.0)["policy"]["floor_why"] == floor.why
    # The draft cost each mode's server paid, saved beside the floor, is the book's price.
    rates = {Mode.CASCADE: 60.0, Mode.NGRAM_SIMPLE: 50.0}
    save_floor(tmp_path, key, rates, "runs/v", {Mode.NGRAM_SIMPLE: 0.52})
    assert load_draft_costs(settings) == {Mode.NGRAM_SIMPLE: 0.52}
    book = build_router(settings).counterfactual
    assert book is not None and book.cost(Mode.NGRAM_SIMPLE) == 0.52
    assert book.cost(Mode.NGRAM_MOD) == settings.router.draft_cost  # not measured
    fixed = settings.model_copy(update={"router": RouterSettings(fit_draft_cost=False)})
    book = build_router(fixed).counterfactual
    assert book is not None and book.cost(Mode.NGRAM_SIMPLE) == fixed.router.draft_cost


def test_resolve_floor_named_mode_and_no_llama_server(tmp_path: Path) -> None:
    assert resolve_floor(settings_in(tmp_path, "baseline")) == Floor(
        Mode.BASELINE, "baseline: set by router.floor"
    )
    # Nothing installed in this cache folder: the key cannot be made, the default stands.
    floor = resolve_floor(settings_in(tmp_path))
    assert floor == Floor(Mode.NGRAM_MOD, "ngram-mod: default (llama-server not found)")


def test_calibration_key_names_build_model_and_cpus(tmp_path: Path, fake_binary: Path) -> None:
    settings = load_settings(
        cache_dir=tmp_path,
        models_dir=ROOT / "models",
        profile="cpu-gemma-270m",
        llama_server=fake_binary,
    )
    # A user's own binary stands by its path.
    expected = f"{fake_binary}|gemma-3-270m-q4_k_m.gguf|{os.cpu_count()}cpu"
    assert calibration_key(settings) == expected


def test_router_settings_reach_the_policy() -> None:
    router = RouterSettings(floor=Mode.CASCADE, probe="never", probe_min_tokens=9)
    settings = Settings(router=router)
    r = build_router(settings)
    assert (r.policy.floor, r.policy.probe, r.policy.probe_min_tokens) == (Mode.CASCADE, "never", 9)
    assert r.floor_why == "cascade: set by router.floor"
    with pytest.raises(ValidationError):
        RouterSettings(probe="sometimes")  # pyright: ignore[reportArgumentType]
    with pytest.raises(ValidationError):
        RouterSettings(floor="turbo")  # pyright: ignore[reportArgumentType]


# --- the cascade mode ----------------------------------------------------------------


def test_cascade_runs_ngram_simple_then_ngram_mod_with_ngram_mods_flags() -> None:
    assert list(Mode).index(Mode.CASCADE) == list(Mode).index(Mode.NGRAM_MOD) + 1
    assert Mode("cascade") is Mode.CASCADE
    args = mode_args(Mode.CASCADE, SpeculationSettings())
    assert args == [
        *("--spec-type", "ngram-simple,ngram-mod"),
        *("--spec-ngram-mod-n-match", "24"),
        *("--spec-ngram-mod-n-min", "16"),
        *("--spec-ngram-mod-n-max", "32"),
    ]
    assert args[2:] == mode_args(Mode.NGRAM_MOD, SpeculationSettings())[2:]
    spec = SpeculationSettings(ngram_mod_n_match=12, ngram_mod_n_min=8, ngram_mod_n_max=8)
    args = mode_args(Mode.CASCADE, spec)
    assert args[args.index("--spec-ngram-mod-n-min") + 1] == "8"
    assert args[args.index("--spec-ngram-mod-n-max") + 1] == "8"
    assert args[args.index("--spec-ngram-mod-n-match") + 1] == "12"


def test_ngram_mod_n_min_may_not_exceed_n_max() -> None:
    with pytest.raises(ValidationError, match="must not exceed"):
        SpeculationSettings(ngram_mod_n_min=40, ngram_mod_n_max=32)
    with pytest.raises(ValidationError):
        SpeculationSettings(ngram_mod_n_max=0)
    with pytest.raises(ConfigError, match="ngram_mod_n_min"):
        load_settings(speculation={"ngram_mod_n_min": 33})  # n_max stays 32
    assert load_settings().speculation.ngram_mod_n_max == 32
