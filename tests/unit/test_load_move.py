"""Where a second process costs little, a request leaves a worse busy server.

On the H200 (gemma, c = 2, ``results/load-gpu-h200-cpu-gemma-270m-20261204-lowb``) the
first request, planned alone, went to ngram-mod's server and 47 of the 49 after it
stayed there: two plain servers had read 0.83 × one at c = 2, so the one-process guard
asked 1.41 × of cascade's curve to start it, and a closed loop never let ngram-mod
drain. Cascade's server, the best at c = 2 that session (351 tok/s against 288), served
the block as a static arm at 1.15 × what the router did.
"""

from __future__ import annotations

from functools import partial

from fronde.modes import Mode
from fronde.router.calibration import LoadCurves
from fronde.router.classify import RequestClass
from fronde.router.placement import MOVE_FLOOR
from fronde.router.policy import Plan, Route, RouterPolicy, plan_route

ALL = set(Mode) - {Mode.DRAFT}  # no draft model

# The session's curves (tok/s at c = 1, 2) and two plain servers against one.
GEMMA = {
    Mode.BASELINE: ((1, 359.0), (2, 261.0)),
    Mode.NGRAM_SIMPLE: ((1, 361.0), (2, 331.0)),
    Mode.NGRAM_MOD: ((1, 332.0), (2, 288.0)),
    Mode.CASCADE: ((1, 364.0), (2, 351.0)),
}
SPREAD = ((1, 1.05), (2, 0.83))

BEST = RouterPolicy(
    load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement="best"
)
at = partial(
    plan_route, RequestClass.GENERAL, ready=ALL, speed=lambda m, c: None, policy=BEST, slots=16
)


def test_the_second_request_leaves_the_worse_server_and_the_rest_follow_it() -> None:
    curves = LoadCurves(GEMMA, "test", SPREAD)
    # Alone: the ordinary rules (the class floor, ngram-mod).
    assert at(in_flight={}, curves=curves) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # The second client's request: cascade (351) beats the busy ngram-mod (288) by more
    # than load_band, and g = 0.83 ≥ MOVE_FLOOR: it moves (before: it joined ngram-mod).
    assert SPREAD[1][1] >= MOVE_FLOOR
    moved = at(in_flight={Mode.NGRAM_MOD: 1}, curves=curves)
    assert moved == Plan(Route.LOAD, Mode.CASCADE)
    # The next finds both decoding: it joins cascade, and ngram-mod drains.
    joined = at(in_flight={Mode.NGRAM_MOD: 1, Mode.CASCADE: 1}, curves=curves)
    assert joined == Plan(Route.LOAD, Mode.CASCADE)
    assert at(in_flight={Mode.CASCADE: 1}, curves=curves) == Plan(Route.LOAD, Mode.CASCADE)


def test_a_busy_server_within_the_band_keeps_the_batch() -> None:
    # ngram-mod's curve at c = 2 within 5 % of cascade's: one batch, no second process.
    close = dict(GEMMA) | {Mode.NGRAM_MOD: ((1, 332.0), (2, 340.0))}
    curves = LoadCurves(close, "test", SPREAD)
    assert at(in_flight={Mode.NGRAM_MOD: 1}, curves=curves) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)


def test_where_a_second_process_crawls_the_request_still_joins_the_busy_server() -> None:
    # Two llama-servers on 2 CPU cores: 0.03 × one. Cascade's 351 is below
    # (2/0.03 − 1) × 288: the drain would crawl, so the request joins ngram-mod.
    curves = LoadCurves(GEMMA, "test", ((1, 0.98), (2, 0.03)))
    assert at(in_flight={Mode.NGRAM_MOD: 1}, curves=curves) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # Just under the floor, the pair bound decides as before: (2/0.45 − 1) × 288 = 992.
    below = LoadCurves(GEMMA, "test", ((1, 0.98), (2, 0.45)))
    assert at(in_flight={Mode.NGRAM_MOD: 1}, curves=below) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
