"""Many agents at once: load curves, the measured load rule, the load benchmark's figures."""

from __future__ import annotations

import asyncio
import gzip
import json
import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from fronde.bench.arms import Target, started
from fronde.bench.breakeven import served_cost
from fronde.bench.load import SPREAD, bracketed, load_setup, spec_of
from fronde.bench.load_mix import agent_mix
from fronde.bench.load_page import arm_colours, load_markdown, load_plot
from fronde.bench.load_report import finite, report_load, served_costs
from fronde.bench.load_rows import load_rows, looping_items, steady_window
from fronde.bench.load_verdict import (
    curves_from,
    held_out_ratios,
    session_curves,
    session_spread,
    session_verdicts,
    spread_ratios,
    verdict_lines,
)
from fronde.bench.passes import Timed
from fronde.bench.store import Store
from fronde.config import Settings, load_settings
from fronde.errors import FrondeError
from fronde.evidence.calibration import (
    LoadCurves,
    load_curves,
    load_key,
    resolve_load,
    save_load_curves,
)
from fronde.json_types import JSONObject
from fronde.modes import Mode
from fronde.router.building import build_router
from fronde.router.classify import RequestClass
from fronde.router.engine import Router
from fronde.router.plan import Plan, Route, RouterPolicy, Situation
from fronde.router.policy import plan_route

ALL = set(Mode) - {Mode.DRAFT}

# A GPU-like shape: speculation wins alone (1 → 700 against 600) and flattens early;
# plain decoding keeps climbing with the batch.
CURVES = LoadCurves(
    {
        Mode.BASELINE: ((1, 600.0), (2, 1150.0), (4, 2200.0), (8, 4000.0), (16, 6000.0)),
        Mode.NGRAM_MOD: ((1, 700.0), (2, 1200.0), (4, 1900.0), (8, 2600.0), (16, 3000.0)),
        Mode.CASCADE: ((1, 690.0), (2, 1190.0), (4, 1850.0), (8, 2500.0), (16, 2900.0)),
    },
    "test",
)


def _route(cls: RequestClass, **at: Any) -> Plan:
    """``plan_route`` with the situation given as keywords (the tests' shorthand)."""
    return plan_route(cls, Situation(**at))


# --- the curves -----------------------------------------------------------------------


def test_a_curve_interpolates_between_loads_and_is_flat_past_the_last() -> None:
    assert CURVES.aggregate(Mode.BASELINE, 0) == 0.0
    assert CURVES.aggregate(Mode.BASELINE, 3) == pytest.approx(1675.0)
    assert CURVES.aggregate(Mode.BASELINE, 12) == pytest.approx(5000.0)
    assert CURVES.aggregate(Mode.BASELINE, 40) == 6000.0  # nothing gained past the knee
    assert CURVES.aggregate(Mode.NGRAM_SIMPLE, 1) is None  # no curve
    assert CURVES.marginal(Mode.NGRAM_MOD, 0) == 700.0
    assert CURVES.marginal(Mode.NGRAM_MOD, 10) == pytest.approx(50.0)
    assert CURVES.marginal(Mode.NGRAM_SIMPLE, 0) is None


def test_the_threshold_is_the_first_load_where_plain_decoding_serves_most() -> None:
    assert CURVES.threshold() == 4
    always_spec = LoadCurves({Mode.BASELINE: ((1, 1.0),), Mode.NGRAM_MOD: ((1, 2.0),)})
    assert always_spec.threshold() is None
    assert LoadCurves({Mode.NGRAM_MOD: ((1, 2.0),)}).threshold() is None


def test_curves_survive_the_file_and_a_damaged_entry_is_ignored(tmp_path: Path) -> None:
    save_load_curves(tmp_path, "k", CURVES)
    back = load_curves(tmp_path, "k")
    assert back is not None and back.points == CURVES.points and back.source == "test"
    data = json.loads((tmp_path / "load.json").read_text())
    assert data["k"]["threshold"] == 4 and "at" in data["k"]
    data["bad"] = {"points": {"no-such-mode": [[1, 2]], "baseline": "x"}}
    (tmp_path / "load.json").write_text(json.dumps(data))
    assert load_curves(tmp_path, "bad") is None
    assert load_curves(tmp_path, "missing") is None
    # The spread (plain2 ÷ plain) travels with the curves; a damaged one is dropped.
    spread = LoadCurves(CURVES.points, "test", ((2, 1.9), (8, 0.8)))
    save_load_curves(tmp_path, "s", spread)
    back = load_curves(tmp_path, "s")
    assert back is not None and back.spread == ((2, 1.9), (8, 0.8))
    assert back.spread_gain(1) == 1.9 and back.spread_gain(32) == 0.8  # flat outside
    assert back.spread_gain(5) == pytest.approx(1.35)
    assert CURVES.spread_gain(4) is None  # not measured
    data = json.loads((tmp_path / "load.json").read_text())
    data["s"]["spread"] = [[2, "x"]]
    (tmp_path / "load.json").write_text(json.dumps(data))
    back = load_curves(tmp_path, "s")
    assert back is not None and back.spread == () and back.points == CURVES.points


def _parallel(settings: Settings, slots: int) -> Settings:
    """``settings`` with ``slots`` parallel slots per backend (a GPU's: the measured rule)."""
    return settings.model_copy(
        update={"backend": settings.backend.model_copy(update={"parallel": slots})}
    )


def test_serve_reads_the_curves_for_its_build_model_and_slots(
    fake_gemma: Callable[[int], Settings],
) -> None:
    settings = fake_gemma(400)
    gpu = _parallel(settings, 8)
    curves, why = resolve_load(gpu)
    assert curves is None and "fronde bench load" in why
    assert load_key(gpu).endswith("|np8")
    save_load_curves(gpu.cache_dir, load_key(gpu), CURVES)
    curves, why = resolve_load(gpu)
    assert curves == CURVES and load_key(gpu) in why
    with capture_logs() as logs:
        router = build_router(gpu)
    assert router.policy.load_rule == "measured" and router.load_curves == CURVES
    # CURVES has no ngram-simple or draft: the modes the load rule can never choose are named.
    missing = [e["modes"] for e in logs if e["event"] == "router.load_curves_missing"]
    assert missing == [["ngram-simple", "draft"]]
    snap = router.snapshot(0.0)
    assert snap["load"]["curves"]["threshold"] == 4 and snap["policy"]["slots"] == 8


# --- the rule -------------------------------------------------------------------------


def speeds(table: dict[tuple[Mode, str], float]) -> Callable[[Mode, str], float | None]:
    return lambda mode, cls: table.get((mode, cls))


MEASURED = RouterPolicy(
    load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement="marginal"
)
route = partial(_route, ready=ALL, speed=speeds({}), policy=MEASURED, curves=CURVES, slots=32)


def test_alone_a_request_is_planned_by_the_ordinary_rules() -> None:
    assert route(RequestClass.GENERAL, in_flight={}) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)


def test_under_load_a_request_goes_where_the_curves_gain_most() -> None:
    # ngram-mod has 8 in flight: one more there gains 50 tok/s, an idle cascade 690.
    p = route(RequestClass.GENERAL, in_flight={Mode.NGRAM_MOD: 8})
    assert p == Plan(Route.LOAD, Mode.CASCADE)
    # Both speculative servers busy (+50 each): the idle baseline (+600).
    p = route(RequestClass.GENERAL, in_flight={Mode.NGRAM_MOD: 8, Mode.CASCADE: 8})
    assert p == Plan(Route.LOAD, Mode.BASELINE)
    # One in flight on each (+500) against an idle baseline (+600): baseline.
    one_each = {Mode.NGRAM_MOD: 1, Mode.CASCADE: 1}
    assert route(RequestClass.GENERAL, in_flight=one_each).mode is Mode.BASELINE
    # Within the band the planned mode keeps the request (its n-gram memory).
    near = LoadCurves({Mode.BASELINE: ((1, 100.0),), Mode.NGRAM_MOD: ((1, 200.0), (2, 297.0))})
    p = route(RequestClass.GENERAL, in_flight={Mode.NGRAM_MOD: 1}, curves=near)
    assert p == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # Every backend loaded: the one whose curve still climbs.
    loaded = {Mode.BASELINE: 8, Mode.NGRAM_MOD: 8, Mode.CASCADE: 8}
    assert route(RequestClass.GENERAL, in_flight=loaded).mode is Mode.BASELINE


def test_the_measured_rule_never_moves_forced_or_unsafe_requests() -> None:
    busy = {Mode.NGRAM_MOD: 16, Mode.BASELINE: 16}
    p = route(RequestClass.GENERAL, in_flight=busy, forced=Mode.NGRAM_MOD)
    assert p == Plan(Route.FORCED, Mode.NGRAM_MOD)
    assert route(RequestClass.UNSAFE, in_flight=busy) == Plan(Route.UNSAFE, Mode.BASELINE)


def test_full_backends_and_modes_without_a_curve_are_not_chosen() -> None:
    p = route(RequestClass.GENERAL, in_flight={Mode.BASELINE: 4, Mode.NGRAM_MOD: 4}, slots=4)
    assert p == Plan(Route.LOAD, Mode.CASCADE)  # the only one with a free slot and a curve
    everything_full = {Mode.BASELINE: 4, Mode.NGRAM_MOD: 4, Mode.CASCADE: 4}
    p = route(RequestClass.GENERAL, in_flight=everything_full, slots=4)
    assert p == Plan(Route.FALLBACK, Mode.NGRAM_MOD)  # queue where planned


def test_a_probe_under_load_is_not_run() -> None:
    probing = RouterPolicy(
        load_rule="measured", floor=Mode.BASELINE, probe="always", load_placement="marginal"
    )
    p = route(RequestClass.GENERAL, in_flight={}, policy=probing)
    assert p.route is Route.PROBE
    p = route(RequestClass.GENERAL, in_flight={Mode.CASCADE: 1}, policy=probing)
    assert p == Plan(Route.LOAD, Mode.NGRAM_MOD)  # idle ngram-mod gains most (+700)
    p = route(RequestClass.GENERAL, in_flight={Mode.CASCADE: 1, Mode.NGRAM_MOD: 1}, policy=probing)
    assert p == Plan(Route.LOAD, Mode.BASELINE)  # its floor, whole, no hand-over


def test_without_curves_the_measured_rule_spreads_when_busy() -> None:
    p = route(RequestClass.EDIT, in_flight={Mode.NGRAM_MOD: 1}, curves=None, busy={Mode.NGRAM_MOD})
    assert p == Plan(Route.FALLBACK, Mode.BASELINE)


def test_parallel_slots_turn_on_the_measured_rule_and_open_the_gate() -> None:
    cpu = load_settings()
    assert cpu.effective_load_rule() == "serialize" and cpu.effective_max_parallel_decodes() == 1
    gpu = load_settings(backend={"parallel": 16})
    assert gpu.effective_load_rule() == "measured"
    assert gpu.effective_max_parallel_decodes() == 16 * len(gpu.modes)
    swap = load_settings(backend={"parallel": 16}, residency="swap")
    assert swap.effective_load_rule() == "serialize"
    named = load_settings(backend={"parallel": 16}, router={"load_rule": "spread"})
    assert named.effective_load_rule() == "spread"
    gated = load_settings(backend={"parallel": 16}, router={"max_parallel_decodes": 3})
    assert gated.effective_max_parallel_decodes() == 3


# --- the benchmark --------------------------------------------------------------------


def test_spec_of_reads_what_speculation_an_argv_starts() -> None:
    assert spec_of(["-m", "x"]) == ()
    assert spec_of(["--spec-default"]) == ("ngram-mod", "24", "48", "64")
    assert spec_of(["--spec-type", "ngram-mod"]) == ("ngram-mod", "24", "48", "64")
    short = ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-min", "16"]
    assert spec_of(short) == ("ngram-mod", "24", "16", "64")
    assert spec_of(["--spec-type", "ngram-simple"]) == ("ngram-simple",)
    assert spec_of(["--spec-type", "ngram-simple,ngram-mod"])[0] == "ngram-simple,ngram-mod"


def test_the_agent_mix_holds_every_prompt_once_in_a_seeded_order() -> None:
    mix = agent_mix()
    ids = [i.id for i in mix.items]
    assert len(ids) == len(set(ids)) == 74
    assert ids == [i.id for i in agent_mix().items]
    assert {i.domain for i in mix.items} >= {"code-editing", "inventory-py"}
    assert [i.id for i in agent_mix(5).items] == ids[:5]


def test_a_mode_is_calibrated_by_the_static_arm_that_starts_the_same_speculation(
    fake_gemma: Callable[[int], Settings],
) -> None:
    settings = fake_gemma(400)
    setup = load_setup(settings, "completion", 16, 1, (1, 4), slots=4, items=3)
    names = [a.name for a in setup.static.arms]
    # Fronde's ngram-mod and cascade use short drafts: their own servers calibrate them.
    # plain2 (two plain servers) has plain's argv but calibrates no mode.
    assert names == ["plain", "default", "cascade", "plain2", "s-simple", "s-mod", "s-casc"]
    assert next(a for a in setup.static.arms if a.name == "plain2").servers == 2
    assert setup.calibration[Mode.BASELINE] == "plain"
    assert setup.calibration[Mode.NGRAM_MOD] == "s-mod"
    assert Mode.DRAFT not in setup.calibration  # no draft model in the profile
    assert setup.settings.backend.parallel == 4 and setup.settings.backend.ctx_size >= 8192
    env = dict(setup.router.arms[1].env)
    assert env["FRONDE_BACKEND__PARALLEL"] == "4"
    assert env["FRONDE_ROUTER__LOAD_RULE"] == "measured"
    # fr-plain first: Fronde in front of the plain server alone (test_load_proxy.py).
    assert [a.name for a in setup.router.arms] == ["fr-plain", "router", "router-b"]
    assert dict(setup.router.arms[2].env)["FRONDE_ROUTER__LOAD_PLACEMENT"] == "best"
    assert [lv.concurrency for lv in setup.router.levels] == [1, 4]
    # With llama-server's defaults, --spec-default and the static cascade stand for them.
    spec = settings.speculation.model_copy(update={"ngram_mod_n_min": 48, "ngram_mod_n_max": 64})
    same = load_setup(
        settings.model_copy(update={"speculation": spec}), "completion", 16, 1, (1,), 1
    )
    assert [a.name for a in same.static.arms] == [
        "plain",
        "default",
        "cascade",
        "plain2",
        "s-simple",
    ]
    assert same.calibration[Mode.NGRAM_MOD] == "default"
    assert same.calibration[Mode.CASCADE] == "cascade"


def test_timed_runs_calibrate_every_mode_on_a_pinned_server(
    fake_gemma: Callable[[int], Settings],
) -> None:
    """Fronde places its requests on adjacent slots, so the curves its router reads are
    of pinned servers: on an H100 the unpinned plain server's curve (383-420 tok/s at
    c = 2-16 against 777-953 pinned) sent those loads to ngram-mod."""
    spec = fake_gemma(400).speculation.model_copy(
        update={"ngram_mod_n_min": 48, "ngram_mod_n_max": 64}
    )
    settings = fake_gemma(400).model_copy(update={"speculation": spec})
    timed = Timed(warmup_s=1.0, window_s=2.0)
    setup = load_setup(settings, "completion", 16, 1, (1, 4), slots=4, items=3, timed=timed)
    by = {a.name: a for a in setup.static.arms}
    assert setup.calibration[Mode.BASELINE] == "pinned"  # plain decoding's pinned arm
    for mode in (Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE):
        arm = by[setup.calibration[mode]]
        assert arm.pin and arm.name.startswith("s-"), (mode, arm)
    # The user's servers stay as a user runs them: unpinned, and calibrate nothing.
    assert not by["default"].pin and not by["cascade"].pin
    assert [a.name for a in setup.static.arms].count("pinned") == 1  # planned once


def _sample(
    arm: str, c: int, rep: int, item: str, t0: float, wall: float, **kw: Any
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "arm": arm,
        "level": f"c{c}" if c > 1 else "",
        "rep": rep,
        "item": item,
        "t0": t0,
        "wall_s": wall,
        "ttft_s": 0.01,
        "tokens": 10,
        "ok": True,
        "repetition": 0.1,
        "route": {},
    }
    return base | kw


def test_old_records_count_aggregate_tokens_in_the_steady_window_and_list_loops_apart(
    tmp_path: Path,
) -> None:
    samples = [
        # plain, c = 2, records without arrival counts (a run before timed windows): two
        # 1-s requests side by side, then one more: the steady window is [0, 1] s (first
        # send to last send), the drain after it is left out.
        _sample("plain", 2, 0, "a", 0.0, 1.0),
        _sample("plain", 2, 0, "b", 0.0, 1.0),
        _sample("plain", 2, 0, "loop", 1.0, 1.0, repetition=0.9),
        # router, c = 2: faster, one request routed by load.
        _sample("router", 2, 0, "a", 0.0, 0.5, route={"class": "load", "mode": "baseline"}),
        _sample("router", 2, 0, "b", 0.0, 0.5, route={"class": "fallback", "mode": "ngram-mod"}),
        _sample("router", 2, 0, "loop", 0.5, 0.5),
        _sample("router", 2, 0, "lost", 0.5, 0.1, ok=False),
    ]
    loops = looping_items(samples)
    assert loops == ["loop"]
    rows = {r.arm: r for r in load_rows(samples, loops)}
    plain, router = rows["plain"], rows["router"]
    assert plain.tok_s == pytest.approx(20.0)  # 20 tokens ÷ 1 s (the loop's came after)
    assert plain.in_flight == pytest.approx(2.0) and plain.n == 3 and plain.failed == 0
    assert router.tok_s == pytest.approx(40.0) and router.failed == 1
    assert router.routes == {"load→baseline": 1, "fallback→ngram-mod": 1}
    assert router.p99_s <= 0.5 < plain.p99_s
    [line] = verdict_lines(list(rows.values()))
    assert line.startswith("c=2: router 40 tok/s = 2.000× plain") and line.endswith("PASS")
    slower = [r for r in load_rows(samples, loops) if r.arm == "plain"]
    assert verdict_lines(slower) == ["c=2: router not run"]
    # No answer of the router ended in the window: no latency, so no verdict either way.
    unended = [replace(r, p99_s=math.nan) if r.arm == "router" else r for r in rows.values()]
    assert verdict_lines(unended) == [
        "c=2: router INVALID: no answer of router or plain ended in the window"
    ]
    curves = curves_from(list(rows.values()), {Mode.BASELINE: "plain"}, "here")
    assert curves.points == {Mode.BASELINE: ((2, 20.0),)}
    page = load_markdown(list(rows.values()), loops, "t", {"plain": "p"}, curves)
    assert "| 2 | router | 40 |" in page and "`w/o loops` in the table): 1: loop" in page
    assert "| 1.0 † |" in page and "records of a run before timed windows" in page
    assert "`--no-screen` keeps them): 0\n" in page
    page = load_markdown(list(rows.values()), loops, "t", {}, curves, screened=["x-1", "y-2"])
    assert "`--no-screen` keeps them): 2: x-1, y-2" in page
    load_plot(list(rows.values()), tmp_path / "load.png", "t")
    assert (tmp_path / "load.png").read_bytes()[:4] == b"\x89PNG"


def test_every_arm_of_a_load_run_gets_its_own_colour() -> None:
    # 11 arms, as the README's quick CPU run has: matplotlib's default cycle has 10
    # colours, and gave plain and router-t the same blue (a new user's trial).
    arms = ["plain", "default", "cascade", "plain2", "s-simple", "s-mod", "s-draft"]
    arms += ["fr-plain", "router", "router-b", "router-t"]
    colours = arm_colours(arms)
    assert list(colours) == arms and len(set(colours.values())) == len(arms)
    assert arm_colours([*arms, *"abcdefghij"])["j"] == colours["plain"]  # 21st: again


def test_the_held_out_ratio_chooses_the_static_arm_on_the_other_repetitions() -> None:
    # c = 4, two repetitions (each rep's figures come from its own block). Two static
    # arms of equal worth whose noise points opposite ways: in-sample, "the best static
    # arm" is the higher of them in each rep; held out, the user's choice is made on
    # the other rep and measured on this one.
    samples = [
        _sample(arm, 4, rep, item, 0.0, 1.0, tokens=tokens)
        for arm, rep, tokens in (
            ("plain", 0, 12),  # the first request's 12 tokens inside [0, 1] s: 12 tok/s
            ("plain", 1, 8),
            ("default", 0, 8),
            ("default", 1, 12),
            ("router", 0, 10),
            ("router", 1, 10),
        )
        for item in ("a", "b")
    ]
    for s in samples:  # the second request is sent at 1 s: the window is [0, 1] s
        if s["item"] == "b":
            s["t0"] = 1.0
    rows = load_rows(samples, [])
    by = {r.arm: r for r in rows}
    assert by["plain"].tok_s_reps == {0: 12.0, 1: 8.0}
    assert by["router"].tok_s == pytest.approx(10.0)
    # In-sample the best static arm reads 10 (the median of plain's 12 and 8) and the
    # router ties it; held out, rep 0 chooses default (12 in rep 1) and finds 8 there,
    # rep 1 chooses plain and finds 8: the router is 1.25× the arm a user would pick.
    assert held_out_ratios(rows, "router", 4) == pytest.approx([1.25, 1.25])
    # A static arm measured in one repetition only cannot be chosen on another: it is
    # left out of the choice, not the whole comparison.
    once = [_sample("cascade", 4, 0, item, t0, 1.0, tokens=40) for item, t0 in (("a", 0), ("b", 1))]
    assert held_out_ratios(load_rows([*samples, *once], []), "router", 4) == pytest.approx(
        [1.25, 1.25]
    )
    [line] = verdict_lines(rows)
    assert "held out 1.250× [1.250, 1.250] → " in line  # both above 1: no "not significant"
    # The router at 12 and 7 instead: held out 12 ÷ 8 and 7 ÷ 8, one on each side of 1.
    mixed = [
        s | {"tokens": (12 if s["rep"] == 0 else 7)} if s["arm"] == "router" else s for s in samples
    ]
    assert held_out_ratios(load_rows(mixed, []), "router", 4) == pytest.approx([1.5, 0.875])
    assert verdict_lines(load_rows(mixed, []))[0].endswith("not significant → FAIL")
    one_rep = [s for s in samples if s["rep"] == 0]
    assert held_out_ratios(load_rows(one_rep, []), "router", 4) == []
    assert "held out" not in verdict_lines(load_rows(one_rep, []))[0]


def test_the_steady_window_leaves_the_drain_out_and_counts_the_part_of_a_request_inside() -> None:
    # c = 2 over three items: "long" runs 0 → 10 s (100 tokens from t = 1 s), "a" 0 → 2 s,
    # then "b" is sent at 2 s and ends at 4 s; the block drains alone until 10 s.
    samples = [
        _sample("plain", 2, 0, "long", 0.0, 10.0, ttft_s=1.0, tokens=100),
        _sample("plain", 2, 0, "a", 0.0, 2.0, ttft_s=0.0, tokens=20),
        _sample("plain", 2, 0, "b", 2.0, 2.0, ttft_s=0.0, tokens=20),
    ]
    assert steady_window(samples) == (0.0, 2.0)
    [row] = load_rows(samples, [])
    # inside [0, 2]: "long" 100 × 1/9 (its decode spans 1 → 10 s), "a" all 20, "b" none.
    assert row.tok_s == pytest.approx(round((100 / 9 + 20) / 2, 1))
    assert row.in_flight == pytest.approx(2.0)  # both clients busy throughout
    # The whole span would have read (100 + 40) ÷ 10 = 14 tok/s: the drain, not the load.
    assert row.tok_s > 14


def test_the_best_placement_gathers_the_load_on_the_server_that_serves_it_best() -> None:
    policy = RouterPolicy(
        load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement="best"
    )
    at = partial(route, RequestClass.GENERAL, policy=policy)
    assert at(in_flight={}) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)  # alone: as planned
    # Load 2: every curve is within 5 % of ngram-mod's 1200: the request joins the
    # batch already on cascade rather than start a second one.
    assert at(in_flight={Mode.CASCADE: 1}) == Plan(Route.LOAD, Mode.CASCADE)
    # With a narrower band only ngram-mod (the planned mode) is near the best.
    narrow = RouterPolicy(
        load_rule="measured",
        floor=Mode.NGRAM_MOD,
        probe="never",
        load_placement="best",
        load_band=0.001,
    )
    p = route(RequestClass.GENERAL, policy=narrow, in_flight={Mode.CASCADE: 1})
    assert p == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # Load 4: plain decoding's 2200 against ngram-mod's 1900: baseline.
    assert at(in_flight={Mode.NGRAM_MOD: 3}) == Plan(Route.LOAD, Mode.BASELINE)
    # Within the band the busiest server keeps gathering (one batch on the GPU).
    tie = LoadCurves({Mode.BASELINE: ((1, 100.0), (8, 800.0)), Mode.CASCADE: ((8, 790.0),)})
    busy = {Mode.CASCADE: 6}
    assert at(in_flight=busy, curves=tie) == Plan(Route.LOAD, Mode.CASCADE)
    # Baseline full: the best of the others.
    full = {Mode.NGRAM_MOD: 3, Mode.BASELINE: 32}
    assert at(in_flight=full) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # A probe under load runs no probe: its floor, or the best server.
    probe = RouterPolicy(
        load_rule="measured", floor=Mode.NGRAM_MOD, probe="always", load_placement="best"
    )
    p = route(RequestClass.GENERAL, policy=probe, in_flight={Mode.CASCADE: 1})
    assert p == Plan(Route.LOAD, Mode.CASCADE)  # the batch on cascade, no probe
    # Forced requests never move.
    forced = at(in_flight={Mode.NGRAM_MOD: 3}, forced=Mode.CASCADE)
    assert forced == Plan(Route.FORCED, Mode.CASCADE)


def test_the_best_placement_spreads_where_a_second_server_was_measured_to_pay() -> None:
    policy = RouterPolicy(
        load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement="best"
    )
    at = partial(route, RequestClass.GENERAL, policy=policy)
    # Load 2, every curve within 5 % of ngram-mod's: two servers served 1.9× one at
    # c = 2, so the request goes to the least busy near server (the planned ngram-mod)
    # instead of joining cascade's batch; at c = 8 they served 0.8×: it gathers.
    spreads = LoadCurves(CURVES.points, "test", ((2, 1.9), (8, 0.8)))
    assert at(in_flight={Mode.CASCADE: 1}, curves=spreads) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    assert at(in_flight={Mode.CASCADE: 1}) == Plan(Route.LOAD, Mode.CASCADE)  # no spread data
    tie = {Mode.BASELINE: ((1, 100.0), (8, 800.0)), Mode.CASCADE: ((8, 790.0),)}
    busy = {Mode.CASCADE: 6, Mode.BASELINE: 1}
    gathers = LoadCurves(tie, "test", ((2, 1.9), (8, 0.8)))
    assert at(in_flight=busy, curves=gathers) == Plan(Route.LOAD, Mode.CASCADE)
    spreads_at_8 = LoadCurves(tie, "test", ((8, 1.3),))
    assert at(in_flight=busy, curves=spreads_at_8) == Plan(Route.LOAD, Mode.BASELINE)
    # Two servers at most, as measured: with baseline and cascade decoding, a request
    # goes to the less busy of them, not to a third, idle server near the best.
    three = {
        Mode.BASELINE: ((8, 800.0),),
        Mode.CASCADE: ((8, 790.0),),
        Mode.NGRAM_MOD: ((8, 795.0),),
    }
    spreads_on_two = LoadCurves(three, "test", ((8, 1.3),))
    assert at(in_flight=busy, curves=spreads_on_two) == Plan(Route.LOAD, Mode.BASELINE)
    assert at(in_flight={Mode.BASELINE: 7}, curves=spreads_on_two) == Plan(
        Route.FALLBACK, Mode.NGRAM_MOD
    )  # one busy: the second server is the least busy near one (the planned ngram-mod)
    # A gain inside the band is no reason to spread.
    within = LoadCurves(tie, "test", ((8, 1.04),))
    assert at(in_flight=busy, curves=within) == Plan(Route.LOAD, Mode.CASCADE)
    # SmolLM2's in-session curves on the H200 at c = 2: cascade 263, ngram-simple 248,
    # ngram-mod 213, baseline 183 tok/s, and two plain servers 1.82× one. Only cascade
    # is within 5 % of the best, yet a second process pays: the pair is cascade and
    # ngram-simple (248 > (2/1.82 − 1) × 263 = 26), and with one request on cascade the
    # next goes to ngram-simple.
    smol = {
        Mode.BASELINE: ((2, 183.0),),
        Mode.NGRAM_SIMPLE: ((2, 248.0),),
        Mode.NGRAM_MOD: ((2, 213.0),),
        Mode.CASCADE: ((2, 263.0),),
    }
    pays = LoadCurves(smol, "test", ((2, 1.82),))
    assert at(in_flight={Mode.CASCADE: 1}, curves=pays) == Plan(Route.LOAD, Mode.NGRAM_SIMPLE)
    assert at(in_flight={Mode.CASCADE: 1}, curves=LoadCurves(smol, "test")) == Plan(
        Route.LOAD, Mode.CASCADE
    )  # without plain2's measurement: one batch
    # A small gain asks more of the second server: at 1.12 it must reach 0.79 × the
    # best; ngram-simple at 0.94 × does, a server at 0.70 × does not.
    small = LoadCurves(smol, "test", ((2, 1.12),))
    assert at(in_flight={Mode.CASCADE: 1}, curves=small) == Plan(Route.LOAD, Mode.NGRAM_SIMPLE)
    weak = {Mode.CASCADE: ((2, 263.0),), Mode.BASELINE: ((2, 184.0),)}
    alone = LoadCurves(weak, "test", ((2, 1.12),))
    assert at(in_flight={Mode.CASCADE: 1}, curves=alone) == Plan(Route.LOAD, Mode.CASCADE)


def test_the_best_placement_keeps_one_process_decoding_where_a_second_was_measured_to_lose() -> (
    None
):
    policy = RouterPolicy(
        load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement="best"
    )
    at = partial(route, RequestClass.GENERAL, policy=policy)
    # This CPU, two slots a server (fronde bench load --clients 1 --clients 2): plain
    # 86 tok/s at c = 2, ngram-mod 81, and two plain servers 0.03 × one (two processes
    # decoding on 2 cores). With a request decoding on ngram-mod the next joins it;
    # without the measurement it went to baseline, the best curve, and both crawled.
    cpu = {Mode.BASELINE: ((1, 64.0), (2, 86.0)), Mode.NGRAM_MOD: ((1, 62.0), (2, 81.0))}
    loses = LoadCurves(cpu, "test", ((1, 0.98), (2, 0.03)))
    assert at(in_flight={Mode.NGRAM_MOD: 1}, curves=loses) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    assert at(in_flight={Mode.NGRAM_MOD: 1}, curves=LoadCurves(cpu, "test")) == Plan(
        Route.LOAD, Mode.BASELINE
    )
    # A curve far above the busy server's still wins: gemma on the H200 at c = 32 with
    # sampling on the GPU, baseline 864 against ngram-mod's 392, and two processes taking
    # turns (0.92 ×): 864 > (2/0.92 − 1) × 392 = 460.
    gemma = {Mode.BASELINE: ((32, 864.0),), Mode.NGRAM_MOD: ((32, 392.0),)}
    turns = LoadCurves(gemma, "test", ((32, 0.92),))
    assert at(in_flight={Mode.NGRAM_MOD: 31}, curves=turns) == Plan(Route.LOAD, Mode.BASELINE)
    # Every placement keeps to it: threshold (plain decoding from c = 1 on these
    # curves) and marginal (baseline gains 64 from one request, ngram-mod 19) both chose
    # baseline, an idle second process.
    for placement in ("threshold", "marginal"):
        other = RouterPolicy(
            load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement=placement
        )
        moved = partial(route, RequestClass.GENERAL, policy=other, in_flight={Mode.NGRAM_MOD: 1})
        assert moved(curves=LoadCurves(cpu, "test")) == Plan(Route.LOAD, Mode.BASELINE)
        assert moved(curves=loses) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # ngram-mod's 392 within load_band of baseline's 405: best's near rule keeps the
    # batch (where the busy curve is further below, a request moves: test_load_move.py).
    close = {Mode.BASELINE: ((32, 405.0),), Mode.NGRAM_MOD: ((32, 392.0),)}
    assert at(in_flight={Mode.NGRAM_MOD: 31}, curves=LoadCurves(close, "test", ((32, 0.92),))) == (
        Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    )


def test_curves_from_a_run_carry_two_servers_against_one() -> None:
    samples = [
        *(_sample("plain", 2, 0, i, 0.0, 1.0, tokens=10) for i in ("a", "b")),
        *(_sample("plain2", 2, 0, i, 0.0, 1.0, tokens=19) for i in ("a", "b")),
        *(_sample(arm, 2, 0, "z", 1.0, 1.0) for arm in ("plain", "plain2")),
    ]
    curves = curves_from(load_rows(samples, []), {Mode.BASELINE: "plain"}, "here")
    assert curves.points == {Mode.BASELINE: ((2, 20.0),)}
    [(c, gain)] = curves.spread
    assert c == 2 and gain == pytest.approx(1.9)
    assert curves_from(load_rows(samples[:2], []), {Mode.BASELINE: "plain"}, "").spread == ()


def test_the_threshold_placement_sends_everything_to_baseline_from_the_measured_load() -> None:
    policy = RouterPolicy(
        load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement="threshold"
    )
    at = partial(route, RequestClass.GENERAL, policy=policy)
    assert at(in_flight={}) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)  # alone
    assert at(in_flight={Mode.NGRAM_MOD: 2}) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)  # 3 < 4
    assert at(in_flight={Mode.NGRAM_MOD: 3}) == Plan(Route.LOAD, Mode.BASELINE)  # 4: plain
    assert at(in_flight={Mode.NGRAM_MOD: 3, Mode.BASELINE: 32}) == Plan(
        Route.FALLBACK, Mode.NGRAM_MOD
    )  # baseline full: queue where planned
    never = LoadCurves({Mode.BASELINE: ((1, 1.0),), Mode.NGRAM_MOD: ((1, 2.0),)})
    assert at(in_flight={Mode.NGRAM_MOD: 30}, curves=never).mode is Mode.NGRAM_MOD


@pytest.mark.anyio
async def test_replays_do_not_wait_for_idleness_with_slots_and_never_pile_up() -> None:
    import asyncio

    from fronde.backends.client import BackendClient
    from fronde.evidence.counterfactual import Counterfactual
    from fronde.request.hindsight import MAX_PENDING, Hindsight
    from fronde.router.engine import Decision

    settings = load_settings()
    book = Counterfactual(settings.speculation, settings.modes)
    router = Router(counterfactual=book)
    router.in_flight[Mode.BASELINE] = 5  # a busy GPU: it never goes idle

    class Stuck(BackendClient):
        def __init__(self) -> None:
            self.calls = 0

        async def post_json(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            self.calls += 1
            await asyncio.sleep(3600)
            return {}

    client = Stuck()
    seen = Hindsight(client, router, wait_idle=False)
    decision = Decision(Plan(Route.FALLBACK, Mode.NGRAM_MOD), RequestClass.GENERAL, "k", 0.0)
    body: JSONObject = {"prompt": "p"}
    for _ in range(MAX_PENDING + 8):  # ngram-mod: its mirror learns from any answer
        seen.after(decision, Mode.NGRAM_MOD, "http://x", "text", body, text="answer")
    assert len(seen._tasks) == MAX_PENDING and seen.dropped == 8  # pyright: ignore[reportPrivateUsage]
    await asyncio.sleep(0.2)
    assert client.calls >= 1  # replays started though requests are in flight
    await seen.aclose()


def test_plain_args_reach_the_baseline_backend_and_the_plain_arm_only(
    fake_gemma: Callable[[int], Settings], tmp_path: Path
) -> None:
    from fronde.backends.pool import plan_pool
    from fronde.bench.arms import ARMS, static_argv
    from fronde.runtime.local import profile_of

    base = fake_gemma(400)
    backend = base.backend.model_copy(update={"plain_args": ["--backend-sampling"]})
    settings = base.model_copy(update={"backend": backend})
    plan = plan_pool(settings, profile_of(settings), tmp_path / "llama-server", tmp_path)
    with_flag = {m for m, spec in plan.specs.items() if "--backend-sampling" in spec.args}
    assert with_flag == {Mode.BASELINE}
    arms = {a.name: a for a in ARMS}
    assert "--backend-sampling" in static_argv(arms["plain"], settings)[1]
    for name in ("default", "cascade"):
        assert "--backend-sampling" not in static_argv(arms[name], settings)[1]
    # Fronde's HTTP threads go to its own servers, never to a server a user would run.
    assert all("--threads-http" in spec.args for spec in plan.specs.values())
    for name in ("plain", "default", "cascade"):
        assert "--threads-http" not in static_argv(arms[name], settings)[1]


def test_every_server_saves_idle_slots_lazily_but_pinned_cis(
    fake_gemma: Callable[[int], Settings], tmp_path: Path
) -> None:
    from fronde.backends.pool import plan_pool
    from fronde.backends.process import NO_CACHE_IDLE_SLOTS
    from fronde.bench.arms import ARMS, static_argv
    from fronde.bench.load import PINNED, PINNED_CIS
    from fronde.runtime.local import profile_of

    settings = fake_gemma(400)
    plan = plan_pool(settings, profile_of(settings), tmp_path / "llama-server", tmp_path)
    assert all(NO_CACHE_IDLE_SLOTS in spec.args for spec in plan.specs.values())
    assert plan.single is not None and NO_CACHE_IDLE_SLOTS in plan.single.args
    arms = {a.name: a for a in (*ARMS, PINNED)}
    for name in ("plain", "default", "cascade", "pinned"):
        assert NO_CACHE_IDLE_SLOTS in static_argv(arms[name], settings)[1]
    # pinned-cis is pinned with llama-server's default: the flag's own effect.
    cis = static_argv(PINNED_CIS, settings)[1]
    assert NO_CACHE_IDLE_SLOTS not in cis
    assert cis == [a for a in static_argv(PINNED, settings)[1] if a != NO_CACHE_IDLE_SLOTS]
    # backend.cache_idle_slots = true leaves llama-server's default (a binary without it).
    backend = settings.backend.model_copy(update={"cache_idle_slots": True})
    on = settings.model_copy(update={"backend": backend})
    plan = plan_pool(on, profile_of(on), tmp_path / "llama-server", tmp_path)
    assert not any(NO_CACHE_IDLE_SLOTS in spec.args for spec in plan.specs.values())


def _record_blocks(store: Store, samples: list[dict[str, Any]]) -> None:
    """Append ``samples`` to ``store`` as the benchmark does: samples, then their block."""
    keys = dict.fromkeys((s["arm"], s["level"], s["rep"]) for s in samples)
    for arm, level, rep in keys:
        block = "|".join(["agent-mix", arm, str(rep), *([level] if level else [])])
        for s in samples:
            if (s["arm"], s["level"], s["rep"]) == (arm, level, rep):
                store.append({"type": "sample", "block": block, "block_id": block, **s})
        store.append({"type": "block", "block": block, "block_id": block, "ok": True})


def test_a_load_folder_is_reported_again_from_its_packed_records_cut_short_or_not(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "records.jsonl")
    identity = {"machine": {"cpus": 2}, "max_tokens": 64, "slots": 2, "skip": ["x"]}
    store.append({"type": "run", "identity": identity, "title": "Load: here"})
    rep0 = [
        _sample(arm, 2, 0, i, t0, 1.0, tokens=n)
        for arm, n in (("plain", 10), ("router-b", 15))
        for i, t0 in (("a", 0.0), ("b", 1.0))
    ]
    # A second repetition cut short: plain ran, the router did not.
    rep1 = [_sample("plain", 2, 1, i, t0, 1.0, tokens=20) for i, t0 in (("a", 0.0), ("b", 1.0))]
    _record_blocks(store, rep0 + rep1)
    # As committed to results/: gzipped, with the load.json an older run wrote.
    store.packed.write_bytes(gzip.compress(store.path.read_bytes()))
    store.path.unlink()
    (tmp_path / "load.json").write_text(json.dumps({"calibration": {"baseline": "plain"}}))
    with pytest.raises(FrondeError, match="recorded no calibration"):
        _no_calibration(tmp_path)
    verdict = report_load(tmp_path)
    # plain: 10 tok/s in rep 0, 20 in rep 1 (median 15); router-b 15 in rep 0 only.
    assert verdict == [
        "c=2: router-b 15 tok/s = 1.000× plain [1.000, 1.000], p99 1.00 s = 1.00× → PASS"
    ]
    page = (tmp_path / "load.md").read_text()
    assert page.startswith("# Load: here\n")
    rows = [line for line in page.splitlines() if line.startswith("| 2 |")]
    assert [r.split(" | ")[1] for r in rows] == ["router-b", "plain"]
    assert "| 2 | plain | 15 | [10, 20] |" in page
    [plain_row] = [line for line in page.splitlines() if line.startswith("| 2 | plain |")]
    assert plain_row.endswith("| 4 | 0 | 2 |")  # 4 requests, none failed, 2 repetitions
    assert "- `router-b`: Fronde routing, measured load rule, best placement" in page
    assert "- `(calibration) baseline`: plain" in page
    body = json.loads((tmp_path / "load.json").read_text())
    assert body["slots"] == 2 and body["screened"] == ["x"] and body["verdict"] == verdict
    assert body["curves"]["points"] == {"baseline": [[2, 15.0]]}
    assert (tmp_path / "load.png").read_bytes()[:4] == b"\x89PNG"
    assert not store.path.exists()  # reading appended nothing
    with pytest.raises(FrondeError, match="no `fronde bench load` run"):
        report_load(tmp_path / "elsewhere")
    # A run of this code records its calibration itself: no load.json needed.
    own = Store(tmp_path / "own" / "records.jsonl")
    own.append({"type": "run", "identity": identity, "calibration": {"baseline": "plain"}})
    _record_blocks(own, rep0 + rep1)
    assert report_load(own.path.parent) == verdict


def test_router_arms_are_judged_only_against_static_arms_of_their_own_session() -> None:
    def block(arm: str, tokens: int, session: str, rep: int = 0) -> list[dict[str, Any]]:
        return [
            _sample(arm, 2, rep, i, t0, 1.0, tokens=tokens, session=session)
            for i, t0 in (("a", 0.0), ("b", 1.0))
        ]

    # Session A (a fast lease) measured plain at 30 tok/s; session B (a slow one) the
    # router at 15, then plain's second repetition at 10.
    samples = [*block("plain", 30, "A"), *block("router", 15, "B"), *block("plain", 10, "B", 1)]
    # Across sessions the median of plain's two (20) beats the router; within B the
    # router is 1.5× plain.
    assert verdict_lines(load_rows(samples, [])) == [
        "c=2: router 15 tok/s = 0.750× plain [0.750, 0.750], p99 1.00 s = 1.00× → FAIL"
    ]
    assert session_verdicts(samples, []) == [
        "[session B] c=2: router 15 tok/s = 1.500× plain [1.500, 1.500], p99 1.00 s = 1.00× → PASS"
    ]
    # A router measured in a session of its own is not compared with anything.
    lone = [*block("plain", 30, "A"), *block("router", 15, "C")]
    assert session_verdicts(lone, []) == [
        "[session C] router arms with no static arm measured in that session: INVALID, not compared"
    ]
    # One session: the lines are verdict_lines', unprefixed.
    one = [s for s in samples if s["session"] == "B"]
    assert session_verdicts(one, []) == verdict_lines(load_rows(one, []))
    page = load_markdown(load_rows(lone, []), [], "t", {}, None, session_verdicts(lone, []))
    assert "compares arms within one session only" in page and "- [session C] router" in page
    # plain2 ÷ plain likewise: only where one session measured both.
    spread = [*lone, *block("plain2", 45, "C"), *block("plain2", 60, "A", 1)]
    assert session_spread(spread, []) == pytest.approx({2: 2.0})  # A: 60 ÷ 30
    apart = [*lone, *block("plain2", 45, "C")]
    assert session_spread(apart, []) == {}
    page = load_markdown(load_rows(apart, []), [], "t", {}, None, [], {})
    assert "Not compared: `plain2` and `plain` were measured in different sessions" in page
    # The curves the router reads: each arm from the latest session that measured it
    # (plain from A, 30; default from C, which also measured it in A), and no spread
    # from plain2 in C against plain in A.
    later = [*apart, *block("default", 40, "A"), *block("default", 20, "C")]
    curves = session_curves(later, {Mode.BASELINE: "plain", Mode.NGRAM_MOD: "default"}, "t")
    assert curves.points == {Mode.BASELINE: ((2, 30.0),), Mode.NGRAM_MOD: ((2, 20.0),)}
    assert curves.spread == ()
    assert session_curves(spread, {Mode.BASELINE: "plain"}, "t").spread == ((2, 2.0),)


def _no_calibration(folder: Path) -> None:
    """A copy of ``folder``'s records without the load.json that names the calibration."""
    bare = folder / "bare"
    bare.mkdir()
    (bare / "records.jsonl.gz").write_bytes((folder / "records.jsonl.gz").read_bytes())
    report_load(bare)


def test_two_plain_servers_are_shown_against_one_and_left_out_of_the_verdict() -> None:
    samples = [
        # c = 2: plain 20 tok/s, plain2 (two servers) 36, default 16, the router 24.
        *(_sample("plain", 2, 0, i, 0.0, 1.0, tokens=10) for i in ("a", "b")),
        *(_sample("plain2", 2, 0, i, 0.0, 1.0, tokens=18) for i in ("a", "b")),
        *(_sample("default", 2, 0, i, 0.0, 1.0, tokens=8) for i in ("a", "b")),
        *(_sample("router", 2, 0, i, 0.0, 1.0, tokens=12) for i in ("a", "b")),
        *(_sample(arm, 2, 0, "z", 1.0, 1.0) for arm in ("plain", "plain2", "default", "router")),
    ]
    rows = load_rows(samples, [])
    assert spread_ratios(rows) == pytest.approx({2: 1.8})
    # The best single server is plain (20), not plain2 (36): the router passes at 1.2×.
    [line] = verdict_lines(rows)
    assert line.startswith("c=2: router 24 tok/s = 1.200× plain") and line.endswith("PASS")
    page = load_markdown(rows, [], "t", {}, None)
    assert "Does spreading pay?" in page and "c=2 1.80×" in page


def test_an_arm_of_two_servers_sends_each_request_to_the_less_busy() -> None:
    target = Target("http://a", {}, urls=("http://a", "http://b"))
    with target.server() as first, target.server() as second:
        assert (first, second) == ("http://a", "http://b")
        with target.server() as third:
            assert third == "http://a"  # a tie goes to the first
    with target.server() as again:
        assert again == "http://a"  # every request ended: both idle again
    assert target.busy == {"http://a": 0, "http://b": 0}
    with Target("http://one", {}).server() as url:
        assert url == "http://one"


@pytest.mark.anyio
async def test_a_static_arm_of_two_servers_starts_two_llama_servers(
    fake_gemma: Callable[[int], Settings], tmp_path: Path
) -> None:
    settings = fake_gemma(400)
    async with started(SPREAD, settings, None, tmp_path) as target:
        assert len(set(target.urls)) == 2 and target.base_url == target.urls[0]
        async with httpx.AsyncClient(timeout=10) as http:
            for url in target.urls:
                assert (await http.get(f"{url}/health")).status_code == 200
    logs = await asyncio.to_thread(lambda: sorted(p.name for p in tmp_path.glob("*.log")))
    assert logs == ["plain2-1.log", "plain2.log"]
    async with httpx.AsyncClient(timeout=2) as http:  # both stopped on exit
        for url in target.urls:
            with pytest.raises(httpx.TransportError):
                await http.get(f"{url}/health")


def test_the_verify_cost_a_server_paid_is_fitted_from_its_requests_timings() -> None:
    # 2 ms a pass and 0.5 ms a drafted token (draft cost 0.25), as gemma's speculative
    # servers paid on the H200 (0.27–0.45), not llama-bench's 0.025 (forward pass only).
    def timings(tokens: int, accepted: int, drafted: int) -> dict[str, float]:
        ms = 2.0 * (tokens - accepted) + 0.5 * drafted
        return {
            "predicted_n": tokens,
            "predicted_ms": ms,
            "draft_n": drafted,
            "draft_n_accepted": accepted,
        }

    mix = [timings(64, a, d) for a, d in ((0, 0), (10, 30), (20, 40), (5, 60), (30, 45))] * 2
    fit = served_cost(mix)
    assert fit is not None and fit.requests == 10 and fit.drafted == 350
    assert fit.pass_ms == pytest.approx(2.0) and fit.drafted_ms == pytest.approx(0.5)
    assert fit.draft_cost == pytest.approx(0.25)
    assert served_cost(mix[:7]) is None  # too few requests
    assert served_cost([timings(64, 0, 0)] * 10) is None  # plain decoding drafts nothing
    # The page: each static speculative arm alone (c = 1); plain and routers left out.
    plain = [timings(64, 0, 0)] * 10
    samples = [
        _sample(arm, 1, 0, f"i{k}", float(k), 1.0, timings=t)
        for arm, ts in (("default", mix), ("plain", plain), ("router", mix))
        for k, t in enumerate(ts)
    ]
    costs = served_costs(samples)
    assert list(costs) == ["default"]
    page = load_markdown(load_rows(samples, []), [], "t", {}, None, None, None, costs)
    assert "default 2.00 ms a pass, 0.50 ms a drafted token, draft cost 0.250" in page


def test_static_and_router_repetitions_alternate_which_runs_first() -> None:
    assert bracketed(1) == [("static", 0), ("router", 0)]
    assert bracketed(3) == [
        ("static", 0),
        ("router", 0),
        ("router", 1),
        ("static", 1),
        ("static", 2),
        ("router", 2),
    ]
    # With an even number of repetitions both plans sit at the same mean place in the run.
    order = bracketed(4)
    mean = {
        part: sum(i for i, (p, _) in enumerate(order) if p == part) / 4
        for part in ("static", "router")
    }
    assert mean["static"] == mean["router"]


def test_the_load_curves_best_mode_alone_becomes_the_floor_where_it_is_clearly_best(
    fake_gemma: Callable[[int], Settings],
) -> None:
    settings = fake_gemma(400)
    gpu = _parallel(settings, 8)
    # The H200 shape of 2026-12-04 (gemma): plain decoding best alone, by 15 %.
    h200 = LoadCurves(
        {
            Mode.BASELINE: ((1, 344.0), (16, 721.0)),
            Mode.NGRAM_MOD: ((1, 300.0), (16, 368.0)),
            Mode.CASCADE: ((1, 295.0), (16, 375.0)),
        },
        "run-folder",
    )
    save_load_curves(gpu.cache_dir, load_key(gpu), h200)
    router = build_router(gpu)
    assert router.policy.floor is Mode.BASELINE
    assert "load curves' best alone (344 tok/s against ngram-mod 300" in router.floor_why
    decision = router.plan(RequestClass.GENERAL, "k", ready=set(gpu.modes), now=0.0, budget=64)
    assert decision.plan == Plan(Route.FALLBACK, Mode.BASELINE)
    # Within load_band (5 %) of the best, the floor stays where it was.
    near = LoadCurves({Mode.BASELINE: ((1, 310.0),), Mode.NGRAM_MOD: ((1, 300.0),)})
    save_load_curves(gpu.cache_dir, load_key(gpu), near)
    assert build_router(gpu).policy.floor is Mode.NGRAM_MOD
    # A floor the user set is theirs.
    save_load_curves(gpu.cache_dir, load_key(gpu), h200)
    named = gpu.model_copy(update={"router": gpu.router.model_copy(update={"floor": Mode.CASCADE})})
    assert build_router(named).policy.floor is Mode.CASCADE
    # One request at a time (the CPU's serialize rule) reads no curves: unchanged.
    assert build_router(settings).policy.floor is Mode.NGRAM_MOD


def test_load_json_writes_a_missing_figure_as_null_not_nan() -> None:
    body = {"p99_s": math.nan, "rows": [1.5, math.inf], "c": (2, -math.inf)}
    text = json.dumps(finite(body), allow_nan=False)  # strict JSON: raises on a NaN left
    assert json.loads(text) == {"p99_s": None, "rows": [1.5, None], "c": [2, None]}
