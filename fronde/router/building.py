"""Build the router a settings tree describes (:func:`build_router`).

Its policy, floor, load curves, counterfactual book, EMAs and cache.
"""

from __future__ import annotations

from fronde.config import Settings
from fronde.evidence.calibration import (
    Floor,
    LoadCurves,
    curve_floor,
    load_draft_costs,
    resolve_floor,
    resolve_load,
)
from fronde.evidence.counterfactual import Counterfactual
from fronde.evidence.measure import Measurements
from fronde.logging import get_logger
from fronde.router.cache import RouteCache
from fronde.router.draft_length import resolve_draft_lengths
from fronde.router.engine import Router
from fronde.router.plan import RouterPolicy
from fronde.router.ports import RouterEvents, StateStore

__all__ = ["build_router", "cache_from", "measurements_from"]

log = get_logger(__name__)


def build_router(
    settings: Settings,
    *,
    measurements: Measurements | None = None,
    cache: RouteCache | None = None,
    store: StateStore | None = None,
    events: RouterEvents | None = None,
    floor: Floor | None = None,
) -> Router:
    """Build a router with the policy, EMA and cache settings of ``settings``.

    ``measurements`` and ``cache`` are built from the settings unless given (a
    :class:`StateStore` is built over them first); ``floor`` is resolved from
    them (:func:`~fronde.evidence.calibration.resolve_floor`) unless given; under the
    ``measured`` load rule with curves and ``router.floor = "auto"``, the curves'
    best mode alone may replace it (:func:`~fronde.evidence.calibration.curve_floor`).
    The draft length by load is read whatever the load rule
    (:func:`~fronde.router.draft_length.resolve_draft_lengths`).
    """
    r = settings.router
    start = floor if floor is not None else resolve_floor(settings)
    rule = settings.effective_load_rule()
    curves, load_why = resolve_load(settings) if rule == "measured" else (None, "")
    if floor is None and r.floor == "auto" and curves is not None:
        start = curve_floor(start, curves, settings.modes, r.load_band)
    policy = RouterPolicy(
        probe_tokens=r.probe_tokens,
        margin=r.margin,
        aggressive=tuple(r.aggressive),
        floor_candidates=tuple(r.floor_candidates),
        edit_mode=r.edit_mode,
        load_rule=rule,
        floor=start.mode,
        probe=r.probe,
        probe_min_tokens=r.probe_min_tokens,
        predict=r.predict,
        predict_band=r.predict_band,
        predict_misses=r.predict_misses,
        predict_sigmas=r.predict_sigmas,
        load_band=r.load_band,
        load_placement=r.load_placement,
    )
    book = Counterfactual(
        settings.speculation,
        settings.modes,
        draft_cost=r.draft_cost,
        ema_alpha=r.ema_alpha,
        band=r.predict_band,
        own_baseline_step=bool(settings.backend.plain_args),
        fit_cost=r.fit_draft_cost,
        prior_costs=load_draft_costs(settings) if r.fit_draft_cost else None,
    )
    log.info("router.floor", floor=str(start.mode), why=start.why, probe=r.probe)
    measurements = measurements if measurements is not None else measurements_from(settings)
    log.info(
        "router.collapse",
        judged=measurements.alone,
        why="one generation at a time"
        if measurements.alone
        else "parallel decodes: a request's speed is its batch's",
    )
    lengths = resolve_draft_lengths(settings)
    log.info("router.draft_lengths", why=lengths.why, schedule=lengths.snapshot()["schedule"])
    if rule == "measured":
        _log_load(settings, curves, load_why)
    return Router(
        policy,
        measurements,
        cache if cache is not None else cache_from(settings),
        slots=settings.backend.parallel,
        max_parallel_decodes=settings.effective_max_parallel_decodes(),
        store=store,
        events=events,
        swap_residency=settings.residency == "swap",
        floor_why=start.why,
        counterfactual=book,
        load_curves=curves,
        load_why=load_why,
        draft_lengths=lengths,
    )


def _log_load(settings: Settings, curves: LoadCurves | None, why: str) -> None:
    """Log the measured load rule's curves, and warn of a served mode that has none.

    A mode with no curve loses every comparison under load (the placements read only
    measured curves), which a partial ``fronde bench load`` run leaves: single-b decoded
    every SmolLM2 answer plainly from c = 2 with no ngram-mod curve
    (``results/load-gpu-h200-cpu-smollm2-135m-20261206-agent-fresh-p9c``).
    """
    threshold = curves.threshold() if curves is not None else None
    log.info("router.load", rule="measured", why=why, plain_from=threshold)
    if curves is None:
        return
    bare = [str(m) for m in settings.modes if curves.aggregate(m, 1) is None]
    if bare:
        why_bare = "the best placement sends their requests to a measured mode"
        log.warning("router.load_curves_missing", modes=bare, why=why_bare)


def measurements_from(settings: Settings) -> Measurements:
    """The EMA and quarantine book ``settings.router`` describes.

    Collapses are judged only where one generation decodes at a time (a decode gate
    of 1: :meth:`~fronde.config.Settings.effective_max_parallel_decodes`); with
    parallel slots a request's speed is the batch's (:mod:`fronde.evidence.measure`).
    """
    r = settings.router
    alone = settings.effective_max_parallel_decodes() == 1
    return Measurements(r.ema_alpha, r.collapse, r.quarantine_s, r.draft_cost, alone=alone)


def cache_from(settings: Settings) -> RouteCache:
    """The prompt-hash cache ``settings.router`` describes."""
    return RouteCache(settings.router.cache_max_entries, settings.router.cache_ttl_s)
