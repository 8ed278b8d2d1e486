"""The routing decision, as a pure function of what the router knows.

Order of rules (the first that applies wins):

1. **unsafe-for-spec**: the request uses a field speculation must not touch →
   baseline, always: no speed rule (quarantine, load, floor) and no forced mode
   moves it to a speculative mode. When baseline is out, such a request waits for it
   or gets a 503.
2. **forced**: the client named a mode (``x-fronde-mode`` or ``fronde:MODE``).
3. **edit**: a large code/JSON block plus an edit verb → the edit mode (ngram-mod),
   with no probe.
4. **cache**: this exact request was routed before → the same mode.
4½. **predicted**: the counterfactual book (:mod:`fronde.router.counterfactual`) has
   a predicted speed-up over baseline for every usable replayable mode in this
   request's bucket (class × prompt self-overlap) → the best of them, or the floor
   when the floor's prediction is within ``predict_band`` of the best: ties go to the
   floor, whose server keeps the n-gram memory of every request it served. The EDIT
   class takes this rule before its own once its bucket has evidence, so its mode
   comes from what edits measured, not from the constant ``edit_mode``.
5. **probe**: generate the first ``probe_tokens`` on the aggressive candidate and
   compare its decode tok/s with the floor's (its EMA for this class, or a floor
   probe the first time); the candidate wins only at ≥ ``margin`` × the floor.
   Under ``probe = "auto"`` (the default) a probe runs only when the token budget
   is open or at least ``probe_min_tokens`` and the candidate is unmeasured for the
   class: a probe of an n-gram mode drafts little in 48 tokens, and its hand-over
   costs about ten decode steps plus a re-prefill (3–9 % of a 128-token request),
   which a short answer cannot repay. ``never`` turns probes off, ``always`` probes
   whenever a candidate differs from the floor (the original FRONDE router).
6. **fallback**: nothing to probe → the floor. Either every aggressive mode is
   quarantined or absent, the preferred one already is this class's floor, or the
   probe policy says no.

The **floor** of a class starts at ``floor`` (the policy's measured best static
mode: ``fronde bench verdict`` finds it per machine and profile, see
:mod:`fronde.router.calibration`; ngram-mod when none was measured), never at
baseline by assumption: in the verdicts of 2026-12-01 a speculative configuration
beat plain decoding on every machine and profile. Another floor candidate replaces
it for a class once this class's EMA has it at ≥ ``margin`` × the floor's; a tie
stays with the starting floor, whose server keeps the n-gram memory of every request
it served. When the floor mode is not running, baseline starts, then the first
usable mode.

**Load rules** (``load_rule``). Speculation loses under concurrency (llama.cpp
reports a net loss at ≥ 2 parallel requests; vLLM and SmartSpec shrink
speculation as the batch grows), and on a small CPU two llama-servers decoding at
once fight over the cores: measured on 2 cores, routing a second client to an idle
baseline cut aggregate throughput from 40 to 16.5 tok/s.

- ``serialize`` (default): while a request is in flight, new ones go to a backend
  that is already decoding and queue there, and no probe starts (a probe hands
  over between backends). Forced and unsafe-for-spec requests keep their mode.
- ``spread``: when the chosen backend is busy (all its slots taken), the request
  goes to baseline if baseline has a free slot, else to any usable mode with a
  free slot, floor first; for a GPU with room for several decodes.
- ``measured`` (the default with parallel slots, ``backend.parallel > 1``): while
  other requests are in flight, the planned mode keeps the request only if its
  backend's **marginal throughput** — the aggregate decode tok/s its load curve
  gains from one more request at its current in-flight count — is within
  ``load_band`` of the best backend's; else the request goes to that best backend
  (class ``load``). The curves are measured per machine, model and slot count by
  ``fronde bench load`` (:class:`~fronde.router.calibration.LoadCurves`), so a
  saturated speculative server hands new work to the plain one exactly where plain
  decoding's curve climbs faster, and to another process where one server's curve
  has flattened. A request alone is planned by the rules above; the load counts the
  requests received and not yet planned (``arriving``), so that clients starting at
  once are each placed for the load they make together. Without curves it
  acts as ``spread``. With ``load_placement = "threshold"`` it only ever moves a
  request to baseline: once the requests in flight, this one counted, reach the load
  from which plain decoding's curve is the highest (one server, no spreading; on the
  H200 marginal spreading lost to it at 5 of 6 loads). With ``load_placement =
  "best"`` (the default: within one H200 session it served more tok/s than threshold
  at every c on gemma, ``results/load-gpu-h200-cpu-gemma-270m-20261203-bs2``, and at 5
  of 6 on SmolLM2 in an earlier form) a request under load goes to the mode whose
  server alone serves the load in flight (this request counted) best by its curve, or to the
  busiest server whose curve is within ``load_band`` of that one: one GPU batches one
  server's requests together, so the requests gather where the best static server for
  that load would have them, and a lone request keeps its per-prompt plan. Where the
  run also measured two plain servers against one (``plain2``) and a second process
  served more at that load (g = ``plain2 ÷ plain`` above 1 + ``load_band``: its step
  spent on the CPU, as gemma's sampling), the less busy of two servers instead, the
  best and the next best whose curve is at least (2/g − 1) × the best's: the
  requests spread over two processes. Every placement, where ``plain2`` measured a
  second process to lose (g below 1 − ``load_band``, as two llama-servers decoding
  at once on 2 CPU cores: 0.01–0.03 ×), joins the server already decoding rather than
  start another, unless the other's curve beats it by (2/g − 1) ×.
- ``off``: requests queue where planned.

``serialize`` and ``spread`` answer with class ``fallback``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from typing import Literal, Protocol

from fronde.config import ROUTER_DEFAULTS, ProbePolicy
from fronde.modes import Mode
from fronde.router.classify import RequestClass

__all__ = [
    "FALLBACK_FLOOR",
    "MARGIN",
    "PROBE_TOKENS",
    "LoadModel",
    "LoadRule",
    "Plan",
    "ProbePolicy",
    "Route",
    "RouterPolicy",
    "SpeedFn",
    "choose_floor",
    "choose_predicted",
    "hand_over_pays",
    "plan_route",
    "probe_allowed",
]

PROBE_TOKENS: int = ROUTER_DEFAULTS.probe_tokens
"""Tokens generated by a probe: 48 (original FRONDE router; ``router.probe_tokens``)."""

MARGIN: float = ROUTER_DEFAULTS.margin
"""How much faster than the floor the aggressive mode must be: 1.10 (original FRONDE
router; ``router.margin``)."""


LoadRule = Literal["serialize", "spread", "measured", "off"]
"""How concurrent requests are placed (see the module docstring)."""


class LoadModel(Protocol):
    """What the ``measured`` load rule asks of the load curves."""

    def marginal(self, mode: Mode, n: int) -> float | None:
        """Aggregate tok/s ``mode``'s backend gains from one more request at load ``n``.

        None when ``mode`` has no curve.
        """
        ...

    def aggregate(self, mode: Mode, n: int) -> float | None:
        """Aggregate tok/s of ``mode``'s backend alone with ``n`` requests in flight."""
        ...

    def threshold(self) -> int | None:
        """The load from which plain decoding's curve is the highest, or None."""
        ...

    def spread_gain(self, n: int) -> float | None:
        """Two servers' aggregate ÷ one's at load ``n``, or None when not measured."""
        ...


FALLBACK_FLOOR = Mode.NGRAM_MOD
"""The starting floor when none was measured (:mod:`fronde.router.calibration`)."""


class Route(StrEnum):
    """Why a mode was chosen; the ``x-fronde-class`` header."""

    FORCED = "forced"
    UNSAFE = "unsafe-for-spec"
    EDIT = "edit"
    CACHE = "cache"
    PREDICTED = "predicted"
    PROBE = "probe"
    FALLBACK = "fallback"
    LOAD = "load"


@dataclass(frozen=True)
class RouterPolicy:
    """Policy constants (defaults from the original FRONDE router).

    Attributes:
        probe_tokens: tokens in a probe.
        margin: the aggressive mode's required speed ratio over the floor.
        aggressive: probe candidates, in order of preference.
        floor_candidates: modes that may serve as a class's floor once measured ≥ baseline.
        edit_mode: the mode for the EDIT class.
        load_rule: ``serialize``, ``spread``, ``measured`` or ``off`` (see the module
            docstring).
        floor: the mode a class's floor starts from (see the module docstring).
        probe: ``auto``, ``always`` or ``never`` (see rule 5).
        probe_min_tokens: under ``auto``, the smallest token budget that is probed.
        predict: whether the predicted rule (4½) may choose.
        predict_band: the floor is kept within this fraction of the best prediction.
    """

    probe_tokens: int = PROBE_TOKENS
    margin: float = MARGIN
    aggressive: tuple[Mode, ...] = tuple(ROUTER_DEFAULTS.aggressive)
    floor_candidates: tuple[Mode, ...] = tuple(ROUTER_DEFAULTS.floor_candidates)
    edit_mode: Mode = ROUTER_DEFAULTS.edit_mode
    load_rule: LoadRule = "serialize"
    floor: Mode = FALLBACK_FLOOR
    probe: ProbePolicy = ROUTER_DEFAULTS.probe
    probe_min_tokens: int = ROUTER_DEFAULTS.probe_min_tokens
    predict: bool = ROUTER_DEFAULTS.predict
    predict_band: float = ROUTER_DEFAULTS.predict_band
    load_band: float = ROUTER_DEFAULTS.load_band
    load_placement: Literal["marginal", "threshold", "best"] = ROUTER_DEFAULTS.load_placement


@dataclass(frozen=True)
class Plan:
    """A routing plan.

    Attributes:
        route: the class of the decision (``x-fronde-class``).
        mode: the mode that serves the request, or the probed candidate.
        floor: for a probe, the mode that continues if the candidate loses.
        floor_tok_s: the floor's EMA decode tok/s for this class; None means the
            floor has to be probed too, the first time.
    """

    route: Route
    mode: Mode
    floor: Mode | None = None
    floor_tok_s: float | None = None


SpeedFn = Callable[[Mode, str], float | None]
"""(mode, class) → EMA decode tok/s, or None if unmeasured."""


def choose_floor(cls: str, usable: Collection[Mode], speed: SpeedFn, policy: RouterPolicy) -> Mode:
    """Return the floor for class ``cls`` among ``usable`` modes (see the module docstring).

    Raises:
        ValueError: ``usable`` is empty.
    """
    if not usable:
        raise ValueError("no usable mode")
    # The starting floor; without its backend, baseline, then the first usable
    # candidate in preference order.
    order: Sequence[Mode] = (policy.floor, Mode.BASELINE, *policy.floor_candidates, *Mode)
    start = next(m for m in order if m in usable)
    own = speed(start, cls)
    if own is None:
        return start
    qualified = [
        (s, m)
        for m in policy.floor_candidates
        if m in usable and m != start and (s := speed(m, cls)) is not None
        if s >= policy.margin * own
    ]
    return max(qualified)[1] if qualified else start


def choose_predicted(
    speedups: Mapping[Mode, float],
    usable: Collection[Mode],
    floor: Mode,
    band: float,
) -> Mode | None:
    """The mode rule 4½ picks from predicted speed-ups over baseline, or None.

    Args:
        speedups: mode → predicted decode speed ÷ baseline's for the request's bucket.
        usable: modes that may serve now.
        floor: the class's floor.
        band: the floor is kept when its speed-up × (1 + band) ≥ the best one.

    Returns:
        None when the floor has no prediction (a draft-model floor: the replay cannot
        stand in for it) or no other usable mode has one.
    """
    known = {m: r for m, r in speedups.items() if m in usable}
    if floor not in known or len(known) < 2:
        return None
    best = max(known, key=lambda m: known[m])
    return floor if known[floor] * (1 + band) >= known[best] else best


def hand_over_pays(
    remaining: int | None,
    context_tokens: int,
    probe_tok_s: float,
    floor_tok_s: float,
    prefill_tok_s: float | None,
) -> bool:
    """Whether handing a probed generation over to a faster floor saves time.

    The floor has to prefill the whole context first (``context_tokens`` at
    ``prefill_tok_s``); from then on each of the ``remaining`` tokens is
    ``1/probe_tok_s − 1/floor_tok_s`` seconds cheaper. The hand-over pays when the
    saving exceeds the prefill: with 16 tokens left it rarely does, and a 64-token
    answer measured 0.79× baseline when it was handed over anyway.

    Args:
        remaining: tokens still to generate, or None when the budget is open.
        context_tokens: prompt plus tokens generated so far.
        probe_tok_s: the probed mode's decode tok/s.
        floor_tok_s: the floor's decode tok/s.
        prefill_tok_s: prefill tok/s measured on this prompt, or None if unknown.

    Returns:
        True to hand over; also when the budget is open or prefill speed unknown.
    """
    if remaining is None or prefill_tok_s is None or prefill_tok_s <= 0:
        return True
    if probe_tok_s <= 0:
        return True
    if floor_tok_s <= probe_tok_s:
        return False
    saved_s = remaining * (1.0 / probe_tok_s - 1.0 / floor_tok_s)
    return saved_s > context_tokens / prefill_tok_s


def _unbusy(plan: Plan, usable: Collection[Mode], busy: Collection[Mode], floor: Mode) -> Plan:
    if plan.mode not in busy:
        return plan
    for m in (Mode.BASELINE, floor, *Mode):
        if m in usable and m not in busy:
            return Plan(Route.FALLBACK, m)
    return plan


def probe_allowed(policy: RouterPolicy, budget: int | None, candidate_tok_s: float | None) -> bool:
    """Whether the probe policy lets a probe run (rule 5 of the module docstring).

    Args:
        policy: its ``probe`` and ``probe_min_tokens``.
        budget: the request's token budget, or None when open.
        candidate_tok_s: the candidate's EMA decode tok/s for the class, or None.
    """
    match policy.probe:
        case "never":
            return False
        case "always":
            return True
        case "auto":
            long = budget is None or budget >= policy.probe_min_tokens
            return long and candidate_tok_s is None


def _plan(
    cls: RequestClass,
    *,
    ready: Collection[Mode],
    speed: SpeedFn,
    policy: RouterPolicy,
    budget: int | None = None,
    forced: Mode | None = None,
    cached: Mode | None = None,
    quarantined: Collection[Mode] = (),
    probation: Collection[Mode] = (),
    busy: Collection[Mode] = (),
    speedups: Mapping[Mode, float] | None = None,
) -> Plan:
    """The rules without the ``serialize`` load rule; arguments as :func:`plan_route`."""
    if cls is RequestClass.UNSAFE:
        # A correctness rule: no speed rule (quarantine, busy) and no forced mode moves
        # it; speculation breaks logprobs and is untested with grammars and tools.
        return Plan(Route.UNSAFE, Mode.BASELINE)
    if forced is not None:
        return Plan(Route.FORCED, forced)
    usable = [m for m in Mode if m in ready and m not in quarantined and m not in probation]
    if not usable:
        # Everything quarantined: serve from a ready backend rather than refuse.
        usable = [m for m in Mode if m in ready]
    floor = choose_floor(cls, usable, speed, policy)
    predicted = (
        choose_predicted(speedups, usable, floor, policy.predict_band)
        if speedups and policy.predict
        else None
    )
    if cls is RequestClass.EDIT and predicted is not None:
        return _unbusy(Plan(Route.PREDICTED, predicted), usable, busy, floor)
    if cls is RequestClass.EDIT:
        route = Route.EDIT if policy.edit_mode in usable else Route.FALLBACK
        mode = policy.edit_mode if route is Route.EDIT else floor
        return _unbusy(Plan(route, mode), usable, busy, floor)
    if cached is not None and cached in usable:
        return _unbusy(Plan(Route.CACHE, cached), usable, busy, floor)
    if predicted is not None:
        return _unbusy(Plan(Route.PREDICTED, predicted), usable, busy, floor)
    # A mode on probation is probed before it gets traffic again.
    probe_pool = [m for m in Mode if m in ready and m not in quarantined]
    # The first available aggressive mode is the candidate; the others stand in
    # only while it is out. A candidate that already is the floor has nothing to
    # prove, and probing it would only cost the floor a second prefill.
    candidate = next((m for m in policy.aggressive if m in probe_pool), None)
    if candidate is None or candidate == floor:
        return _unbusy(Plan(Route.FALLBACK, floor), usable, busy, floor)
    if candidate in busy or not probe_allowed(policy, budget, speed(candidate, str(cls))):
        return _unbusy(Plan(Route.FALLBACK, floor), usable, busy, floor)
    return Plan(Route.PROBE, candidate, floor, speed(floor, str(cls)))


def _serialize(plan: Plan, active: Collection[Mode], usable: Collection[Mode]) -> Plan:
    """Keep every request on a backend that is already decoding (one at a time on a CPU)."""
    if not active or plan.route in (Route.FORCED, Route.UNSAFE):
        return plan
    if plan.mode in active and plan.route is not Route.PROBE:
        return plan
    target = (
        plan.mode
        if plan.mode in active
        else next((m for m in Mode if m in active and m in usable), None)
    )
    return plan if target is None else Plan(Route.FALLBACK, target)


def _planned(plan: Plan) -> Mode:
    """The mode a plan stands for under load.

    A probe hands over between two backends; under load that costs more than it finds
    out, so a probe's floor stands for the planned mode.
    """
    return plan.floor if plan.route is Route.PROBE and plan.floor is not None else plan.mode


def _free_rates(
    usable: Collection[Mode],
    in_flight: Mapping[Mode, int],
    slots: int,
    rate: Callable[[Mode], float | None],
) -> dict[Mode, float]:
    """``rate`` of every usable mode whose backend has a free slot and a curve, tok/s."""
    return {
        m: r
        for m in Mode
        if m in usable and in_flight.get(m, 0) < slots and (r := rate(m)) is not None
    }


@dataclass(frozen=True)
class _Load:
    """What the ``measured`` rule's placements read: the load and the measured curves.

    Attributes:
        in_flight: requests decoding per mode's backend.
        usable: modes ready and not quarantined.
        curves: the load curves.
        slots: slots per backend (``-np``).
        band: ``router.load_band``.
        arriving: other requests received and not yet planned (they join the load).
    """

    in_flight: Mapping[Mode, int]
    usable: Collection[Mode]
    curves: LoadModel
    slots: int
    band: float
    arriving: int = 0

    @property
    def n(self) -> int:
        """The load once this request joins: in flight, arriving, plus this one."""
        return sum(self.in_flight.values()) + self.arriving + 1

    @cached_property
    def rates(self) -> dict[Mode, float]:
        """Each free backend's curve at :attr:`n` (aggregate tok/s, its server alone)."""
        n = self.n
        return _free_rates(
            self.usable, self.in_flight, self.slots, lambda m: self.curves.aggregate(m, n)
        )


def _to(plan: Plan, target: Mode) -> Plan:
    """``plan`` sent to ``target`` under load.

    The plan itself where ``target`` is its planned mode (a probe then runs as that
    mode, class ``load``: a probe hands over between backends); else class ``load``.
    """
    if target is _planned(plan):
        return Plan(Route.LOAD, target) if plan.route is Route.PROBE else plan
    return Plan(Route.LOAD, target)


def _measured(
    plan: Plan,
    load: _Load,
    placement: Literal["marginal", "threshold", "best"] = "marginal",
) -> Plan:
    """The ``measured`` load rule (see the module docstring)."""
    if load.n == 1 or plan.route in (Route.FORCED, Route.UNSAFE):
        return plan
    if placement == "threshold":
        chosen = _threshold(plan, load)
    elif placement == "best":
        chosen = _best(plan, load)
    else:
        chosen = _marginal(plan, load)
    return _one_process(chosen, plan, load)


def _marginal(plan: Plan, load: _Load) -> Plan:
    """``load_placement = "marginal"``: the backend whose curve gains most from one more."""
    in_flight, curves = load.in_flight, load.curves
    gains = _free_rates(
        load.usable, in_flight, load.slots, lambda m: curves.marginal(m, in_flight.get(m, 0))
    )
    if not gains:
        return plan
    best = max(gains.values())
    planned = _planned(plan)
    kept = gains.get(planned)
    if kept is not None and kept >= (1 - load.band) * best:
        return _to(plan, planned)
    # Ties go to the least speculative mode (Mode's order): the cheapest to verify.
    return _to(plan, next(m for m in Mode if gains.get(m) == best))


def _one_process(chosen: Plan, plan: Plan, load: _Load) -> Plan:
    """Every placement: no second process decoding where one was measured to lose.

    Where two plain servers served g < 1 − ``band`` × one at this load
    (:meth:`LoadModel.spread_gain`; 0.01–0.03 × on 2 CPU cores with two slots a
    server, ``results/load-cpu-smollm2-135m-20261203-slots2-before``), a request the
    placement ``chosen`` sends to an idle server joins the server already decoding
    most instead, unless the idle one's curve B beats that one's A by the bound of
    :func:`_best`: a pair serves about g × (A + B) / 2, more than A alone only while
    B > (2/g − 1) × A. Without that measurement, or with no server decoding that has a
    free slot, ``chosen`` stands.
    """
    gain = load.curves.spread_gain(load.n)
    if gain is None or gain >= 1 - load.band or load.in_flight.get(chosen.mode, 0) > 0:
        return chosen
    rates = load.rates
    busy = _busiest(rates, load.in_flight)
    if busy is None:
        return chosen
    rate = rates.get(chosen.mode)
    if rate is not None and rate > (2 / gain - 1) * rates[busy]:
        return chosen
    return _to(plan, busy)


def _best(plan: Plan, load: _Load) -> Plan:
    """``load_placement = "best"``: the server that serves the load in flight best.

    Among the servers whose curve at the load in flight is within ``band`` of the best,
    the busiest (one batch). Where two servers were measured to serve more than one at
    that load (:meth:`LoadModel.spread_gain` g above 1 + band), the less busy of two
    servers instead (two at most, what was measured): those already decoding, else the
    best by curve and the next best among those whose curve is at least (2/g − 1) × the
    best's. The bound: two plain servers serve g × one, so a pair of servers A and B,
    each taking its share in proportion to its own curve, serves about g × (A + B) / 2,
    more than A alone while B > (2/g − 1) × A (g = 1.8: any B above 0.11 A; g = 1.12:
    above 0.79 A). A band of ``band`` around the best alone never spread on the H200's
    in-session curves (SmolLM2 at c = 2: cascade 263, the next 248, g = 1.82), where
    the two plain servers of ``plain2`` served 1.8× one. Where g is below 1 − band, no
    second process starts unless the bound says so (:func:`_one_process`, every
    placement).
    """
    planned = _planned(plan)
    in_flight, band = load.in_flight, load.band
    rates = load.rates
    if not rates:
        return _to(plan, planned)
    top = max(rates.values())
    near = [m for m in rates if rates[m] >= (1 - band) * top]
    order = list(Mode)
    gain = load.curves.spread_gain(load.n)
    if gain is not None and gain > 1 + band:
        # A second process adds throughput at this load (measured, plain2 ÷ plain): the
        # pair of servers (the bound in the docstring), then the less busy of the two.
        pair = [m for m in rates if rates[m] >= (2 / gain - 1) * top]
        pair.sort(key=lambda m: (-rates[m], m is not planned, order.index(m)))
        busy = [m for m in pair if in_flight.get(m, 0) > 0]
        pool = (busy + [m for m in pair if m not in busy])[:2]
        target = min(pool, key=lambda m: (in_flight.get(m, 0), m is not planned, order.index(m)))
    else:
        # Join the server already decoding most (one batch on the GPU), then the planned
        # mode, then the least speculative (Mode's order: the cheapest to verify).
        target = max(near, key=lambda m: (in_flight.get(m, 0), m is planned, -order.index(m)))
    return _to(plan, target)


def _busiest(rates: Mapping[Mode, float], in_flight: Mapping[Mode, int]) -> Mode | None:
    """The server with a free slot (in ``rates``) that decodes the most requests; None if idle."""
    busy = [m for m in rates if in_flight.get(m, 0) > 0]
    return max(busy, key=lambda m: (in_flight[m], rates[m])) if busy else None


def _threshold(plan: Plan, load: _Load) -> Plan:
    """``load_placement = "threshold"``: baseline from the measured load on, else as planned."""
    threshold = load.curves.threshold()
    loaded = threshold is not None and load.n >= threshold
    free = Mode.BASELINE in load.usable and load.in_flight.get(Mode.BASELINE, 0) < load.slots
    if loaded and free and _planned(plan) is not Mode.BASELINE:
        return Plan(Route.LOAD, Mode.BASELINE)
    return _to(plan, _planned(plan))


def plan_route(
    cls: RequestClass,
    *,
    ready: Collection[Mode],
    speed: SpeedFn,
    policy: RouterPolicy,
    budget: int | None = None,
    forced: Mode | None = None,
    cached: Mode | None = None,
    quarantined: Collection[Mode] = (),
    probation: Collection[Mode] = (),
    busy: Collection[Mode] = (),
    active: Collection[Mode] = (),
    speedups: Mapping[Mode, float] | None = None,
    in_flight: Mapping[Mode, int] | None = None,
    curves: LoadModel | None = None,
    slots: int = 1,
    arriving: int = 0,
) -> Plan:
    """Decide how to route one request (pure; see the module docstring for the rules).

    Args:
        cls: the request's static class.
        ready: modes whose backend is ready now.
        speed: EMA lookup, (mode, class) → decode tok/s or None.
        policy: constants, the load rule among them.
        budget: the request's token budget (``max_tokens``), or None when open.
        forced: a mode the client named, if any (already checked to exist).
        cached: the prompt-hash cache's mode for this request, if any.
        quarantined: modes kept out after a collapse.
        probation: modes out of quarantine but not yet re-probed.
        busy: modes whose backend has no free slot (for the ``spread`` rule).
        active: modes with a request in flight (for the ``serialize`` rule).
        speedups: the counterfactual book's predicted speed-up over baseline per
            mode for the request's bucket (rule 4½), or None.
        in_flight: requests in flight per mode (for the ``measured`` rule).
        curves: the measured load curves (``measured`` rule); None acts as ``spread``.
        slots: requests one backend serves at once (llama-server ``-np``).
        arriving: other requests received and not yet planned (``measured`` rule: they
            count in the load, so that clients starting at once are placed for the
            load they make together).

    Returns:
        The plan.

    Raises:
        ValueError: no ready mode at all (the caller answers 503 before that).
    """
    measured = policy.load_rule == "measured"
    plan = _plan(
        cls,
        ready=ready,
        speed=speed,
        policy=policy,
        budget=budget,
        forced=forced,
        cached=cached,
        quarantined=quarantined,
        probation=probation,
        busy=busy if policy.load_rule == "spread" or (measured and curves is None) else (),
        speedups=speedups,
    )
    if measured and curves is not None:
        usable = [m for m in Mode if m in ready and m not in quarantined]
        load = _Load(in_flight or {}, usable, curves, slots, policy.load_band, arriving)
        plan = _measured(plan, load, policy.load_placement)
    if policy.load_rule == "serialize":
        usable = [m for m in Mode if m in ready and m not in quarantined]
        plan = _serialize(plan, active, usable)
    return plan
