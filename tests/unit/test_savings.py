"""What the live page says with numbers: time saved, a mode's speed figure, each class's floor."""

from __future__ import annotations

import pytest

from fronde.evidence.measure import Measurements
from fronde.evidence.measurement import STALE_S, Measurement, speed_summary
from fronde.evidence.savings import Reference, Served, time_saved
from fronde.modes import Mode
from fronde.router.classify import RequestClass
from fronde.router.engine import Router
from fronde.router.plan import Route, RouterPolicy
from fronde.timings import Timings

ALL = list(Mode)


def served(**by_mode: tuple[int, float]) -> Served:
    """A class's totals: mode (``_`` for ``-``) → (tokens, decode seconds), one request each."""
    s = Served()
    for name, (tokens, seconds) in by_mode.items():
        mode = name.replace("_", "-")
        s.add(mode, tokens, seconds)
        s.answered(mode)
    return s


# --- time_saved --------------------------------------------------------------------


def test_tokens_another_mode_decoded_are_priced_at_the_references_speed() -> None:
    # 300 tokens in 5 s on ngram-mod; baseline measured at 40 tok/s would take 7.5 s.
    got = time_saved(
        {"general": served(ngram_mod=(300, 5.0))}, {"general": Reference("baseline", 40.0)}
    )
    assert got.saved_s == pytest.approx(2.5)
    assert (got.requests, got.tokens, got.decode_s, got.reference_s) == (1, 300, 5.0, 7.5)
    assert got.ratio == pytest.approx(1.5)
    assert got.as_dict()["speedup"] == 1.5


def test_a_slower_choice_is_time_lost() -> None:
    got = time_saved(
        {"general": served(ngram_mod=(100, 4.0))}, {"general": Reference("baseline", 50.0)}
    )
    assert got.saved_s == pytest.approx(2.0 - 4.0)


def test_the_references_own_tokens_cost_what_they_cost() -> None:
    # The floor served 100 tokens in 10 s (a busy moment) while its median is 40 tok/s:
    # against itself that is 0 s, not 10 − 2.5 s lost. A probe candidate's 50 tokens in
    # 1 s would have taken the floor 1.25 s.
    s = served(ngram_mod=(100, 10.0), ngram_simple=(50, 1.0))
    got = time_saved({"general": s}, {"general": Reference("ngram-mod", 40.0)})
    assert got.saved_s == pytest.approx(0.25)
    assert got.reference_s == pytest.approx(10.0 + 1.25)
    # A class served by its reference alone needs no speed at all.
    alone = time_saved(
        {"edit": served(ngram_mod=(200, 3.0))}, {"edit": Reference("ngram-mod", None)}
    )
    assert alone.saved_s == 0.0 and alone.missing == {}


def test_a_class_without_a_measured_reference_is_named_not_guessed() -> None:
    classes = {"general": served(ngram_mod=(300, 5.0)), "edit": served(ngram_mod=(200, 2.0))}
    refs = {
        "general": Reference("baseline", 40.0),
        "edit": Reference("baseline", None, "baseline has 1 of 3 fresh samples in class edit"),
    }
    got = time_saved(classes, refs)
    assert got.saved_s == pytest.approx(2.5)  # general only
    assert got.by_class == {"general": pytest.approx(2.5), "edit": None}
    assert got.missing == {"edit": "baseline has 1 of 3 fresh samples in class edit"}
    assert got.requests == 1 and got.tokens == 300
    nothing = time_saved({"edit": classes["edit"]}, {})
    assert nothing.saved_s is None and nothing.ratio is None
    assert nothing.missing == {"edit": "no measured speed"}
    assert time_saved({}, {}).saved_s is None  # no request yet


def test_served_refuses_negative_figures() -> None:
    with pytest.raises(ValueError, match="must be ≥ 0"):
        Served().add("baseline", -1, 1.0)


# --- a mode's speed figure ---------------------------------------------------------


def test_one_busy_moment_is_never_the_figure() -> None:
    assert speed_summary([], now=0.0).state == "unmeasured"
    one = speed_summary([(0.0, 1.3)], now=5.0)
    assert (one.state, one.fresh, one.median_tok_s) == ("few", 1, 1.3)
    three = speed_summary([(0.0, 38.0), (5.0, 1.3), (10.0, 41.0)], now=20.0)
    assert (three.state, three.median_tok_s, three.newest_age_s) == ("trusted", 38.0, 10.0)
    old = speed_summary([(0.0, 38.0), (1.0, 40.0), (2.0, 41.0)], now=2.0 + STALE_S + 1)
    assert (old.state, old.median_tok_s, old.kept) == ("stale", None, 3)
    assert old.as_dict()["newest_age_s"] == pytest.approx(STALE_S + 1)


def test_a_modes_summary_covers_every_class_and_only_what_was_folded_in() -> None:
    ms = Measurements()
    ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 30.0), now=0.0)
    ms.record(Mode.NGRAM_MOD, "edit", Measurement(64, 90.0), now=1.0)
    ms.record(Mode.NGRAM_MOD, "edit", Measurement(8, 1.0), now=2.0)  # too short: ignored
    ms.record(Mode.NGRAM_MOD, "general", Measurement(64, 32.0), now=3.0)
    snap = ms.snapshot(now=4.0)["ngram-mod"]
    assert snap["speed"] == {
        "median_tok_s": 32.0,
        "fresh": 3,
        "kept": 3,
        "newest_age_s": 1.0,
        "state": "trusted",
    }
    assert snap["by_class_speed"]["edit"]["state"] == "few"
    assert ms.classes() == ["edit", "general"]


# --- the router's classes and time saved ---------------------------------------------


def routed(r: Router, cls: RequestClass, mode: Mode, tokens: int, tok_s: float, now: float) -> None:
    """Plan, record and finish one request of ``cls`` decoded on ``mode``."""
    d = r.plan(cls, f"k{now}", ALL, now=now)
    r.record(d, mode, Timings(tokens, tok_s, predicted_ms=tokens / tok_s * 1000), now=now)
    r.finish(d, "done", now=now)


def test_the_snapshot_says_per_class_floor_choice_evidence_and_time_saved() -> None:
    r = Router(RouterPolicy(floor=Mode.NGRAM_MOD, probe="never"), floor_why="ngram-mod: measured")
    for t in range(3):  # the floor, at 40 tok/s: routed as "fallback"
        routed(r, RequestClass.GENERAL, Mode.NGRAM_MOD, 80, 40.0, now=float(t))
    # Unsafe requests measure baseline in their own class; they save nothing.
    for t in range(3):
        routed(r, RequestClass.UNSAFE, Mode.BASELINE, 80, 20.0, now=10.0 + t)
    snap = r.snapshot(now=20.0)
    general = snap["classes"]["general"]
    assert (general["floor"], general["floor_why"]) == ("ngram-mod", "ngram-mod: measured")
    assert general["last"] == {
        "id": "r3",
        "route": "fallback",
        "mode": "ngram-mod",
        "class_floor": "ngram-mod",
    }
    assert general["served"] == {
        "requests": 3,
        "modes": {"ngram-mod": 3},
        "tokens": 240,
        "decode_s": 6.0,
    }
    assert general["measured"]["ngram-mod"]["median_tok_s"] == 40.0
    assert general["saved"] == {"floor": 0.0, "baseline": None}
    saved = snap["saved"]
    assert saved["floor"]["saved_s"] == 0.0 and saved["floor"]["requests"] == 3
    assert saved["baseline"]["saved_s"] is None
    assert saved["baseline"]["missing"] == {
        "general": "baseline has 0 of 3 fresh samples in class general"
    }
    assert snap["classes"]["unsafe-for-spec"]["served"]["requests"] == 0
    assert snap["recent"][0]["class_floor"] == "ngram-mod"  # a fallback row names its floor


def test_time_saved_against_baseline_once_baseline_is_measured_in_the_class() -> None:
    policy = RouterPolicy(floor=Mode.BASELINE, probe="never", floor_candidates=(Mode.NGRAM_MOD,))
    r = Router(policy)
    for t in range(3):  # baseline, the starting floor, at 20 tok/s
        routed(r, RequestClass.GENERAL, Mode.BASELINE, 100, 20.0, now=float(t))
    forced = r.plan(RequestClass.GENERAL, "f", ALL, forced=Mode.NGRAM_MOD, now=3.0)
    r.record(forced, Mode.NGRAM_MOD, Timings(100, 50.0, predicted_ms=2000.0), now=3.0)
    r.finish(forced, "done", now=3.0)  # forced: neither time nor a request counts
    d = r.plan(RequestClass.GENERAL, "e", ALL, now=4.0)
    assert d.plan.route is Route.FALLBACK
    # A request the router sent to ngram-mod (as a probe's winner would be): 100 tokens
    # in 2 s against baseline's 5 s.
    r.record(d, Mode.NGRAM_MOD, Timings(100, 50.0, predicted_ms=2000.0), now=4.0)
    r.finish(d, "done", now=4.0)
    saved = r.snapshot(now=5.0)["saved"]["baseline"]
    assert saved["saved_s"] == pytest.approx(3.0)
    assert (saved["requests"], saved["tokens"], saved["decode_s"]) == (4, 400, 17.0)
    assert saved["speedup"] == pytest.approx(20.0 / 17.0, abs=1e-3)


def test_a_class_floor_follows_the_measurements() -> None:
    policy = RouterPolicy(floor=Mode.BASELINE, floor_candidates=(Mode.NGRAM_MOD,), margin=1.1)
    r = Router(policy, floor_why="baseline: set by the policy")
    r.plan(RequestClass.GENERAL, "k", ALL, now=0.0)
    assert r.class_floor("general", now=0.0) == (Mode.BASELINE, "baseline: set by the policy")
    for t in range(3):
        r.measurements.record(Mode.BASELINE, "general", Measurement(64, 30.0), now=float(t))
        r.measurements.record(Mode.NGRAM_MOD, "general", Measurement(64, 40.0), now=float(t))
    assert r.class_floor("general", now=3.0) == (
        Mode.NGRAM_MOD,
        "measured ≥ 1.1× baseline in this class",
    )
    r.plan(RequestClass.GENERAL, "k2", [Mode.NGRAM_MOD], now=4.0)  # baseline is down
    assert r.class_floor("general", now=4.0)[1] == "baseline, the starting floor, is not usable now"
