"""Where a second process costs little, a request leaves a worse busy server.

On the H200 (gemma, c = 2, ``results/load-gpu-h200-cpu-gemma-270m-20261204-lowb``) the
first two requests went to cascade's server; the third, planned alone as they ended,
went to ngram-mod's, and all 47 after it stayed there: two plain servers had read 0.83
× one at c = 2, so the one-process guard asked 1.41 × of cascade's curve to start it,
and a closed loop never let ngram-mod drain. Cascade's server, the best at c = 2 that
session (351 tok/s against 288), served the block as a static arm at 1.15 × what the
router did.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from fronde.evidence.calibration import LoadCurves
from fronde.modes import Mode
from fronde.router.classify import RequestClass
from fronde.router.placement import MOVE_FLOOR, Placement
from fronde.router.plan import Plan, Route, RouterPolicy, Situation
from fronde.router.policy import plan_route

ALL = set(Mode) - {Mode.DRAFT}  # no draft model

# The session's curves (tok/s at c = 1, 2) and two plain servers against one.
GEMMA = {
    Mode.BASELINE: ((1, 359.0), (2, 261.0)),
    Mode.NGRAM_SIMPLE: ((1, 361.0), (2, 331.0)),
    Mode.NGRAM_MOD: ((1, 332.0), (2, 288.0)),
    Mode.CASCADE: ((1, 364.0), (2, 351.0)),
}
SPREAD = ((1, 1.05), (2, 0.83))


def _route(cls: RequestClass, **at: Any) -> Plan:
    """``plan_route`` with the situation given as keywords (the tests' shorthand)."""
    return plan_route(cls, Situation(**at))


def _unmeasured(mode: Mode, cls: str) -> float | None:
    return None


def _at(placement: Placement = "best") -> partial[Plan]:
    policy = RouterPolicy(
        load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement=placement
    )
    return partial(
        _route,
        RequestClass.GENERAL,
        ready=ALL,
        speed=_unmeasured,
        policy=policy,
        slots=16,
    )


def test_the_second_request_leaves_the_worse_server_and_the_rest_follow_it() -> None:
    at = _at()
    curves = LoadCurves(GEMMA, "test", SPREAD)
    # Alone: the ordinary rules (the class floor, ngram-mod).
    assert at(in_flight={}, curves=curves) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # The second client's request: ngram-mod (288) is more than load_band below the
    # best curve (cascade, 351) and g = 0.83 ≥ MOVE_FLOOR: it moves (it used to join).
    assert SPREAD[1][1] >= MOVE_FLOOR
    assert at(in_flight={Mode.NGRAM_MOD: 1}, curves=curves) == Plan(Route.LOAD, Mode.CASCADE)
    # The next finds both decoding: it joins cascade, and ngram-mod drains.
    joined = at(in_flight={Mode.NGRAM_MOD: 1, Mode.CASCADE: 1}, curves=curves)
    assert joined == Plan(Route.LOAD, Mode.CASCADE)


def test_a_move_goes_among_the_servers_best_counts_as_equal_to_the_best() -> None:
    # Cascade 351, baseline 340 (within 5 % of it), ngram-mod 330 (not) and busy: best
    # sends the request to baseline (the least speculative of the near ones), which
    # beats ngram-mod by 3 % only; the move is judged against the best curve.
    near = dict(GEMMA) | {
        Mode.BASELINE: ((1, 359.0), (2, 340.0)),
        Mode.NGRAM_MOD: ((1, 332.0), (2, 330.0)),
    }
    moved = _at()(in_flight={Mode.NGRAM_MOD: 1}, curves=LoadCurves(near, "test", SPREAD))
    assert moved == Plan(Route.LOAD, Mode.BASELINE)
    # ngram-mod within 5 % of the best: best's near rule keeps the batch.
    close = dict(GEMMA) | {Mode.NGRAM_MOD: ((1, 332.0), (2, 340.0))}
    kept = _at()(in_flight={Mode.NGRAM_MOD: 1}, curves=LoadCurves(close, "test", SPREAD))
    assert kept == Plan(Route.FALLBACK, Mode.NGRAM_MOD)


def test_no_move_starts_a_third_process_or_crawls() -> None:
    curves = LoadCurves(GEMMA, "test", SPREAD)
    # marginal sends the 4th request to the idle ngram-simple (+361 tok/s): two servers
    # already decode, so it joins the busiest (ngram-mod) as the guard says.
    two = {Mode.NGRAM_MOD: 2, Mode.CASCADE: 1}
    assert _at("marginal")(in_flight=two, curves=curves) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # With one decoding, marginal's choice (cascade, +364 tok/s from an idle server,
    # the best curve at load 2) is a move.
    one = _at("marginal")(in_flight={Mode.NGRAM_MOD: 1}, curves=curves)
    assert one == Plan(Route.LOAD, Mode.CASCADE)
    # Two llama-servers on 2 CPU cores (0.03 × one), or just under the floor: the pair
    # bound, (2/g − 1) × 288, decides as before, and the request joins ngram-mod.
    for g in (0.03, MOVE_FLOOR - 0.01):
        slow = LoadCurves(GEMMA, "test", ((1, 0.98), (2, g)))
        assert _at()(in_flight={Mode.NGRAM_MOD: 1}, curves=slow) == Plan(
            Route.FALLBACK, Mode.NGRAM_MOD
        )
    at_floor = LoadCurves(GEMMA, "test", ((1, 0.98), (2, MOVE_FLOOR)))
    assert _at()(in_flight={Mode.NGRAM_MOD: 1}, curves=at_floor) == Plan(Route.LOAD, Mode.CASCADE)
