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
4½. **predicted**: the counterfactual book (:mod:`fronde.evidence.counterfactual`) has
   a predicted speed-up over baseline for every usable replayable mode in this
   request's bucket (class × prompt self-overlap) → the best of them, or the floor
   when the floor's prediction is within ``predict_band`` of the best: ties go to the
   floor, whose server keeps the n-gram memory of every request it served. With
   parallel slots (a GPU) a mode must also beat the floor by the book's own median
   error on that mode's predictions, once it has a few
   (:meth:`~fronde.evidence.counterfactual.Counterfactual.mode_errors`). And it must
   be faster than the floor at ``predict_sigmas`` standard errors below the mean of
   the bucket's paired samples (:mod:`fronde.evidence.paired`): the requests of one
   bucket differ more than the modes do, and a point prediction 3 % above the floor's
   is noise. The EDIT class takes this rule before its own once its bucket has evidence, so its mode
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
:mod:`fronde.evidence.calibration`; ngram-mod when none was measured), never at
baseline by assumption: in the verdicts of 2026-12-01 a speculative configuration
beat plain decoding on every machine and profile. Another floor candidate replaces
it for a class once this class's EMA has it at ≥ ``margin`` × the floor's; a tie
stays with the starting floor, whose server keeps the n-gram memory of every request
it served. With measured load curves (the ``measured`` rule) the starting floor is the
mode whose curve is highest at one request in flight, unless the verdict's floor is
within ``load_band`` of it (:func:`~fronde.evidence.calibration.curve_floor`): the curves
were measured with the slots and flags being served. When the floor mode is not
running, baseline starts, then the first usable mode.

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
- ``measured`` (the default with parallel slots, ``backend.parallel > 1``): a request
  alone is planned by the rules above; while other requests are in flight or arriving,
  it goes where the measured load curves place it (:mod:`fronde.router.placement`:
  ``best``, the default, ``threshold`` or ``marginal``), class ``load`` when it moves.
  Without curves it acts as ``spread``.
- ``off``: requests queue where planned.

``serialize`` and ``spread`` answer with class ``fallback``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from fronde.modes import Mode
from fronde.router.classify import RequestClass
from fronde.router.placement import Load, Placement, place
from fronde.router.plan import Plan, Route, RouterPolicy, Situation, SpeedFn

__all__ = [
    "choose_floor",
    "choose_predicted",
    "hand_over_pays",
    "plan_route",
    "probe_allowed",
]


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
    errors: Mapping[Mode, float] | None = None,
    sure: Mapping[tuple[Mode, Mode], float] | None = None,
) -> Mode | None:
    """The mode rule 4½ picks from predicted speed-ups over baseline, or None.

    Args:
        speedups: mode → predicted decode speed ÷ baseline's for the request's bucket.
        usable: modes that may serve now.
        floor: the class's floor.
        band: another mode is picked only where its speed-up is above the floor's ×
            (1 + band).
        errors: mode → the book's median error on that mode's own predictions
            (:meth:`~fronde.evidence.counterfactual.Counterfactual.mode_errors`; the
            router passes it with parallel slots only): such a mode must be above the
            floor's × (1 + the larger of band and its error). None or empty: the band
            alone.
        sure: (mode, floor) → the speed ratio the bucket's paired samples support
            (:meth:`~fronde.evidence.counterfactual.Counterfactual.sure_gains`,
            ``router.predict_sigmas`` standard errors below their mean): a mode with
            such a figure must also have it above 1. None: no such bar.

    Returns:
        The best of the modes that clear their bar, else the floor; None when the floor
        has no prediction (a draft-model floor: the replay cannot stand in for it) or no
        other usable mode has one.
    """
    known = {m: r for m, r in speedups.items() if m in usable}
    if floor not in known or len(known) < 2:
        return None
    errs = errors or {}
    bar = {m: known[floor] * (1 + max(band, errs.get(m, 0.0))) for m in known}
    doubt = sure or {}
    cleared = [
        m
        for m in known
        if m is not floor and known[m] > bar[m] and doubt.get((m, floor), math.inf) > 1.0
    ]
    return max(cleared, key=lambda m: known[m]) if cleared else floor


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


def _plan(cls: RequestClass, at: Situation) -> Plan:
    """The rules without the load rules; arguments as :func:`plan_route`."""
    policy, speed, ready, quarantined = at.policy, at.speed, at.ready, at.quarantined
    if cls is RequestClass.UNSAFE:
        # A correctness rule: no speed rule (quarantine, busy) and no forced mode moves
        # it; speculation breaks logprobs and is untested with grammars and tools.
        return Plan(Route.UNSAFE, Mode.BASELINE)
    if at.forced is not None:
        return Plan(Route.FORCED, at.forced)
    usable = [m for m in Mode if m in ready and m not in quarantined and m not in at.probation]
    if not usable:
        # Everything quarantined: serve from a ready backend rather than refuse.
        usable = [m for m in Mode if m in ready]
    floor = choose_floor(cls, usable, speed, policy)
    predicted = (
        choose_predicted(at.speedups, usable, floor, policy.predict_band, at.errors, at.sure)
        if at.speedups and policy.predict
        else None
    )
    if cls is RequestClass.EDIT and predicted is not None:
        return _unbusy(Plan(Route.PREDICTED, predicted), usable, at.busy, floor)
    if cls is RequestClass.EDIT:
        route = Route.EDIT if policy.edit_mode in usable else Route.FALLBACK
        mode = policy.edit_mode if route is Route.EDIT else floor
        return _unbusy(Plan(route, mode), usable, at.busy, floor)
    if at.cached is not None and at.cached in usable:
        return _unbusy(Plan(Route.CACHE, at.cached), usable, at.busy, floor)
    if predicted is not None:
        return _unbusy(Plan(Route.PREDICTED, predicted), usable, at.busy, floor)
    # A mode on probation is probed before it gets traffic again.
    probe_pool = [m for m in Mode if m in ready and m not in quarantined]
    # The first available aggressive mode is the candidate; the others stand in
    # only while it is out. A candidate that already is the floor has nothing to
    # prove, and probing it would only cost the floor a second prefill.
    candidate = next((m for m in policy.aggressive if m in probe_pool), None)
    if candidate is None or candidate == floor:
        return _unbusy(Plan(Route.FALLBACK, floor), usable, at.busy, floor)
    if candidate in at.busy or not probe_allowed(policy, at.budget, speed(candidate, str(cls))):
        return _unbusy(Plan(Route.FALLBACK, floor), usable, at.busy, floor)
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


def _to(plan: Plan, target: Mode) -> Plan:
    """``plan`` sent to ``target`` under load.

    The plan itself where ``target`` is its planned mode (a probe then runs as that
    mode, class ``load``: a probe hands over between backends); else class ``load``.
    """
    if target is _planned(plan):
        return Plan(Route.LOAD, target) if plan.route is Route.PROBE else plan
    return Plan(Route.LOAD, target)


def _measured(plan: Plan, load: Load, placement: Placement) -> Plan:
    """The ``measured`` load rule: ``plan`` under ``load`` (:mod:`fronde.router.placement`)."""
    if load.n == 1 or plan.route in (Route.FORCED, Route.UNSAFE):
        return plan
    target = place(_planned(plan), load, placement)
    return plan if target is None else _to(plan, target)


def plan_route(cls: RequestClass, at: Situation) -> Plan:
    """Decide how to route one request (pure; see the module docstring for the rules).

    Args:
        cls: the request's static class.
        at: what the router knows now (:class:`~fronde.router.plan.Situation`).

    Returns:
        The plan.

    Raises:
        ValueError: no ready mode at all (the caller answers 503 before that).
    """
    policy = at.policy
    measured = policy.load_rule == "measured"
    # The busy set is read only by the spread rule (and measured without its curves).
    spread = policy.load_rule == "spread" or (measured and at.curves is None)
    plan = _plan(cls, at if spread or not at.busy else replace(at, busy=()))
    if measured and at.curves is not None:
        usable = [m for m in Mode if m in at.ready and m not in at.quarantined]
        load = Load(at.in_flight or {}, usable, at.curves, at.slots, policy.load_band, at.arriving)
        plan = _measured(plan, load, policy.load_placement)
    if policy.load_rule == "serialize":
        usable = [m for m in Mode if m in at.ready and m not in at.quarantined]
        plan = _serialize(plan, at.active, usable)
    return plan
