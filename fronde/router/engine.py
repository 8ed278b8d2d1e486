"""The router's state and its two verbs: plan a request, record a result.

One :class:`Router` per app owns the measurements, the prompt-hash cache and the
in-flight counts; the policy itself is the pure :func:`~fronde.router.policy.plan_route`.
Everything runs on the event loop, so no locking is needed. What it tells the outside
(metrics) goes through a :class:`RouterEvents` sink and what it shares with other
replicas through a :class:`StateStore`, both given to its constructor; the dispatcher
(:mod:`fronde.router.dispatch`) is the only caller of its verbs.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from fronde.config import Settings
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.router.cache import RouteCache
from fronde.router.calibration import (
    Floor,
    LoadCurves,
    curve_floor,
    resolve_floor,
    resolve_load,
)
from fronde.router.classify import RequestClass
from fronde.router.counterfactual import Counterfactual, bucket_of
from fronde.router.measure import MIN_TOKENS, MIN_TRUSTED_SAMPLES, Measurement, Measurements
from fronde.router.policy import Plan, Route, RouterPolicy, choose_floor, plan_route
from fronde.router.savings import Reference, Served, time_saved
from fronde.timings import Timings

__all__ = ["Decision", "Router", "RouterEvents", "StateStore", "Status"]

log = get_logger(__name__)

RECENT_KEPT = 200
"""Recent routing decisions kept for ``/fronde/v1/router``."""


Status = Literal["waiting", "running", "done", "error", "cancelled"]
"""A request's state: waiting (for its mode to be resident, or for a decode slot),
answering, answered, failed (HTTP or in-band error), client gone."""


@dataclass
class Decision:
    """A planned request and what was measured of it (one row of the recent list).

    Times are ``time.monotonic()`` seconds unless named ``_ms``. ``streamed``
    counts the events relayed to the client so far (llama-server sends one per
    token), which gives the live decode tok/s of a running stream. ``class_floor``:
    for a ``fallback`` route, the class's floor when it was planned (the live page
    says "floor" when the request went there, "fallback" when a load rule sent it
    elsewhere).
    """

    plan: Plan
    cls: RequestClass
    key: str
    started: float
    rid: str = ""
    wall: float = field(default_factory=time.time)
    probe_tok_s: float | None = None
    floor_tok_s: float | None = None
    winner: Mode | None = None
    decode_tok_s: float | None = None
    alpha: float | None = None
    tau: float | None = None
    tokens: int | None = None
    status: Status = "waiting"
    error: str | None = None
    ended: float | None = None
    queued_ms: float | None = None
    overhead_ms: float | None = None
    streamed: int = 0
    first_event: float | None = None
    last_event: float | None = None
    bucket: str = ""
    predicted: dict[str, float] = field(default_factory=dict[str, float])
    counterfactual: dict[str, float] = field(default_factory=dict[str, float])
    measurement: Measurement | None = None
    class_floor: Mode | None = None

    @property
    def predicted_tok_s(self) -> float | None:
        """The decode tok/s predicted for the mode that serves, before generating."""
        return self.predicted.get(str(self.winner or self.plan.mode))

    def live_tok_s(self) -> float | None:
        """Events per second since the first one: (streamed − 1) ÷ (last − first), or None."""
        if self.first_event is None or self.last_event is None or self.streamed < 2:
            return None
        span = self.last_event - self.first_event
        return (self.streamed - 1) / span if span > 0 else None

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready view; ``elapsed_s`` runs until the request ends."""
        now = time.monotonic() if now is None else now
        return {
            "id": self.rid,
            "at": self.wall,
            "status": self.status,
            "error": self.error,
            "elapsed_s": round((self.ended or now) - self.started, 2),
            "class": str(self.plan.route),
            "static_class": str(self.cls),
            "mode": str(self.winner or self.plan.mode),
            "probed": str(self.plan.mode) if self.probe_tok_s is not None else None,
            "probe_tok_s": self.probe_tok_s,
            "floor": str(self.plan.floor) if self.plan.floor is not None else None,
            "floor_tok_s": self.floor_tok_s,
            "class_floor": str(self.class_floor) if self.class_floor is not None else None,
            "decode_tok_s": self.decode_tok_s,
            "live_tok_s": self.live_tok_s(),
            "streamed": self.streamed,
            "alpha": self.alpha,
            "tau": self.tau,
            "tokens": self.tokens,
            "queued_ms": self.queued_ms,
            "overhead_ms": self.overhead_ms,
            "bucket": self.bucket,
            "predicted_tok_s": self.predicted_tok_s,
            "predicted": self.predicted,
            "counterfactual": self.counterfactual,
        }


_NOT_ROUTED = (Route.FORCED, Route.UNSAFE)
"""Routes left out of the time saved: the client, or a correctness rule, chose the mode."""


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


class StateStore(Protocol):
    """State shared with other replicas (:class:`~fronde.router.shared.SharedState`)."""

    version: int
    """Bumped when a sync adopted something (the live page polls it)."""

    def route_chosen(self, key: str, mode: Mode, ttl_s: float) -> None:
        """The cache learnt ``key`` → ``mode``: share it for ``ttl_s`` seconds."""
        ...

    def measured(self, mode: Mode, cls: str, m: Measurement) -> None:
        """Fold one generation into the shared EMAs."""
        ...

    def quarantined(self, mode: Mode, seconds: float) -> None:
        """``mode`` collapsed here: quarantine it everywhere for ``seconds``."""
        ...

    async def lookup_route(self, key: str) -> None:
        """On a local cache miss, take ``key``'s mode from the shared cache if known."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready view for ``/fronde/v1/router``."""
        ...


class RouterEvents(Protocol):
    """Where the router reports what happened (:class:`~fronde.metrics.Metrics` listens)."""

    def generation(self, mode: Mode, timings: Timings, collapsed: bool) -> None:
        """A generation on ``mode`` was recorded; ``collapsed``: it quarantined the mode."""
        ...

    def finished(
        self, overhead_ms: float | None, probed: str | None, probe_won: bool | None
    ) -> None:
        """A request ended: Fronde's own time, the probed mode, whether the probe won."""
        ...


class Router:
    """Routing state: measurements, cache, in-flight counts, recent decisions.

    Args:
        policy: routing constants.
        measurements: EMA/quarantine book (a fresh one by default).
        cache: the prompt-hash cache (a fresh one by default).
        slots: concurrent requests one backend serves (llama-server ``-np``); a
            backend with this many in flight is busy for the ``spread`` load rule.
        max_parallel_decodes: generations allowed at once across all backends.
        store: state shared with other replicas, or None.
        events: where recorded generations and finished requests are reported, or None.
        swap_residency: with swap residency, waiting for residency serializes, so the
            load rule must not.
        floor_why: where ``policy.floor`` came from, for ``/fronde/v1/router``.
        counterfactual: the counterfactual book (:mod:`fronde.router.counterfactual`),
            or None to route without it.
        load_curves: measured load curves for the ``measured`` load rule, or None.
        load_why: where ``load_curves`` came from, for ``/fronde/v1/router``.
    """

    def __init__(
        self,
        policy: RouterPolicy | None = None,
        measurements: Measurements | None = None,
        cache: RouteCache | None = None,
        slots: int = 1,
        max_parallel_decodes: int = 1,
        *,
        store: StateStore | None = None,
        events: RouterEvents | None = None,
        swap_residency: bool = False,
        floor_why: str = "",
        counterfactual: Counterfactual | None = None,
        load_curves: LoadCurves | None = None,
        load_why: str = "",
    ) -> None:
        self.policy = policy or RouterPolicy()
        self.load_curves = load_curves
        self.load_why = load_why
        self.counterfactual = counterfactual
        self.floor_why = floor_why or f"{self.policy.floor}: set by the policy"
        if measurements is None:
            measurements = Measurements(alone=max_parallel_decodes == 1)
        self.measurements = measurements
        self.cache = cache if cache is not None else RouteCache()
        self.slots = slots
        # At most this many generations run at once across all backends; the rest
        # wait here. On a small CPU two llama-servers decoding at once oversubscribe
        # the cores (measured: 40 → 1.5 tok/s aggregate with 2 clients on 2 cores).
        self.gate = asyncio.Semaphore(max_parallel_decodes)
        self.in_flight: Counter[Mode] = Counter()
        # Requests received and not yet in flight (dispatch.admission.Arrival): under
        # the measured load rule they count in the load a placement reads, so that a
        # burst of clients starting at once is placed for the load it makes.
        self.arriving = 0
        # When the last request arrived, s (monotonic): Arrival.gathered waits out bursts.
        self.last_arrival: float | None = None
        # When a routed request last ended (its admission released), s (monotonic).
        self.last_end: float | None = None
        self.recent: deque[Decision] = deque(maxlen=RECENT_KEPT)
        self.store = store
        self.events = events
        self.swap_residency = swap_residency
        self._version = 0
        self._ids = itertools.count(1)
        # Routed requests per static class, for the time saved (fronde.router.savings).
        self.served: dict[str, Served] = {}
        self.last_of_class: dict[str, Decision] = {}
        self._ready: frozenset[Mode] = frozenset()  # the ready modes of the last plan

    @property
    def version(self) -> int:
        """Grows on every change a viewer would see (``/fronde/v1/events`` polls it)."""
        return self._version + (self.store.version if self.store is not None else 0)

    @classmethod
    def from_settings(
        cls,
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
        them (:func:`~fronde.router.calibration.resolve_floor`) unless given; under the
        ``measured`` load rule with curves and ``router.floor = "auto"``, the curves'
        best mode alone may replace it (:func:`~fronde.router.calibration.curve_floor`).
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
        if rule == "measured":
            threshold = curves.threshold() if curves is not None else None
            log.info("router.load", rule=rule, why=load_why, plain_from=threshold)
        return cls(
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
        )

    async def recall(self, key: str) -> None:
        """Before planning: another replica may have routed ``key`` (a shared-cache lookup)."""
        if self.store is not None:
            await self.store.lookup_route(key)

    @property
    def places_by_load(self) -> bool:
        """Whether a plan reads the load curves (and so the requests arriving).

        The ``measured`` load rule with curves saved for this machine
        (:func:`~fronde.router.policy.plan_route`); without them it acts as ``spread``.
        """
        return self.policy.load_rule == "measured" and self.load_curves is not None

    def plan(
        self,
        cls: RequestClass,
        key: str,
        ready: Collection[Mode],
        forced: Mode | None = None,
        now: float | None = None,
        budget: int | None = None,
        overlap: float = 0.0,
        arriving_self: bool = False,
    ) -> Decision:
        """Plan one request (see :func:`~fronde.router.policy.plan_route`) and remember it.

        ``budget`` is the request's token budget (None: open), for the probe policy;
        ``overlap`` its prompt's self-overlap
        (:func:`~fronde.router.counterfactual.self_overlap`), for its bucket;
        ``arriving_self``: this request is counted in :attr:`arriving` (the plan reads
        the others).
        """
        now = time.monotonic() if now is None else now
        ms = self.measurements
        quarantined = {m for m in Mode if ms.quarantined(m, now)}
        # Probation waits for a probe; where the probe policy may never probe, an
        # expired quarantine just ends.
        on_probation = {m for m in Mode if ms.on_probation(m, now)}
        probation = on_probation if self.policy.probe == "always" else set[Mode]()
        cached = self.cache.get(key, now, excluded=quarantined | probation)
        bucket = bucket_of(str(cls), overlap)
        book = self.counterfactual
        speedups = book.speedups(bucket) if book is not None else {}
        # With parallel slots (a GPU) a mode also has to clear the book's own misses on it;
        # one generation at a time (a CPU) keeps the rule its verdicts measured.
        errors = book.mode_errors() if book is not None and self.slots > 1 else None
        plan = plan_route(
            cls,
            ready=ready,
            speed=lambda mode, c: ms.trusted_speed(mode, c, now),
            policy=self.policy,
            budget=budget,
            forced=forced,
            cached=cached,
            quarantined=quarantined,
            probation=probation,
            busy={m for m in Mode if self.in_flight[m] >= self.slots},
            active=set() if self.swap_residency else {m for m in Mode if self.in_flight[m] > 0},
            speedups=speedups,
            errors=errors,
            in_flight=self.in_flight,
            arriving=self.arriving - 1 if arriving_self else self.arriving,
            curves=self.load_curves,
            slots=self.slots,
        )
        decision = Decision(plan, cls, key, now, rid=f"r{next(self._ids)}", bucket=bucket)
        self._ready = frozenset(ready)
        if plan.route is not Route.FORCED:
            self.last_of_class[str(cls)] = decision
        if plan.route is Route.FALLBACK:  # the page tells "the floor" from "another mode"
            decision.class_floor = self.class_floor(str(cls), now)[0]
        if book is not None:
            decision.predicted = {str(m): round(v, 2) for m, v in book.predict(bucket).items()}
        self.recent.append(decision)
        self._version += 1
        return decision

    def begin(self, decision: Decision, queued_ms: float) -> None:
        """``decision`` got its backend and decode slot after ``queued_ms``: it runs now."""
        if decision.status == "waiting":
            decision.status, decision.queued_ms = "running", queued_ms
            self._version += 1

    def progress(self, decision: Decision, events: int = 1, now: float | None = None) -> None:
        """Count ``events`` streamed to the client for ``decision`` (live tok/s)."""
        now = time.monotonic() if now is None else now
        if decision.first_event is None:
            decision.first_event = now
        decision.last_event = now
        decision.streamed += events
        self._version += 1

    def finish(
        self,
        decision: Decision,
        status: Status,
        error: str | None = None,
        now: float | None = None,
    ) -> None:
        """End ``decision`` with ``status``; only the first call counts."""
        if decision.status not in ("waiting", "running"):
            return
        decision.status, decision.error = status, error
        decision.ended = time.monotonic() if now is None else now
        self._version += 1
        row = decision.as_dict(decision.ended)
        # A probe was a contest only when the floor's speed was known (an answer that
        # ended inside the probe had nothing to compare against).
        probed = row["probed"] if row["floor_tok_s"] is not None else None
        won = None if probed is None else row["mode"] == probed
        # The canonical line: one per request, everything an operator greps for.
        log.info(
            "request.finished",
            id=row["id"],
            status=status,
            route=row["class"],
            static_class=row["static_class"],
            mode=row["mode"],
            probe=None if probed is None else ("won" if won else "lost"),
            probe_tok_s=_round(row["probe_tok_s"], 1),
            floor_tok_s=_round(row["floor_tok_s"], 1),
            decode_tok_s=_round(row["decode_tok_s"], 1),
            alpha=_round(row["alpha"], 3),
            tau=_round(row["tau"], 2),
            tokens=row["tokens"],
            overhead_ms=_round(row["overhead_ms"], 3),
            queued_ms=_round(row["queued_ms"], 1),
            predicted_tok_s=row["predicted_tok_s"],
            elapsed_s=row["elapsed_s"],
            error=error,
        )
        if self.events is not None:
            self.events.finished(decision.overhead_ms, probed, won)
        served = self.served.get(str(decision.cls))
        routed = decision.plan.route not in _NOT_ROUTED
        if routed and served is not None and decision.measurement is not None and status == "done":
            served.answered(row["mode"])

    def record(
        self,
        decision: Decision,
        mode: Mode,
        timings: Timings | None,
        now: float | None = None,
    ) -> None:
        """Fold a finished generation's ``timings`` into the EMAs; quarantine on collapse.

        A collapse also drops the cache entries pointing at the collapsed mode.
        Forced requests are reported but do not feed the EMAs: a client forces a
        mode for content it has picked, and letting that steer the class floor
        made every later request of the class skip its probe (measured:
        ``results/router-cpu-20261129b.json``, all "fallback").
        """
        if timings is None:
            return
        m = Measurement.of(timings)
        now = time.monotonic() if now is None else now
        feeds = decision.plan.route is not Route.FORCED
        if decision.plan.route not in _NOT_ROUTED and m.decode_ms > 0:
            # Every segment's time counts, a collapsed one too: it was spent.
            served = self.served.setdefault(str(decision.cls), Served())
            served.add(str(mode), m.tokens, m.decode_ms / 1000.0)
        collapsed = feeds and self.measurements.record(mode, str(decision.cls), m, now)
        if self.store is not None and feeds:
            if collapsed:
                self.store.quarantined(mode, self.measurements.quarantine_s)
            elif m.tokens >= MIN_TOKENS and m.decode_tok_s > 0:  # what record() folded in
                self.store.measured(mode, str(decision.cls), m)
        if self.events is not None:
            self.events.generation(mode, timings, collapsed)
        if collapsed:
            dropped = self.cache.forget_mode(mode)
            log.warning(
                "mode.quarantined",
                mode=str(mode),
                decode_tok_s=round(m.decode_tok_s, 1),
                ema_tok_s=self.measurements.speed(mode),
                quarantine_s=self.measurements.quarantine_s,
                cache_entries_dropped=dropped,
            )
        decision.decode_tok_s = m.decode_tok_s
        decision.alpha, decision.tau, decision.tokens = m.alpha, m.tau, m.tokens
        decision.measurement = m
        self._version += 1

    def observe(
        self,
        decision: Decision,
        mode: Mode,
        prompt: list[int],
        generated: list[int],
        budget: int | None,
    ) -> None:
        """Replay a finished request for every mode and fold it into the counterfactual book.

        Called once the answer's token ids are known, after the answer ended. A
        forced, probed or unsafe-for-spec request only feeds the mirror of the server
        that saw it (its content was picked, or split between two servers); the
        others give every replayable mode a counterfactual speed for the request's
        bucket, and the chosen mode's prediction an error.
        """
        book = self.counterfactual
        if book is None or decision.status != "done":
            return
        m = decision.measurement
        route = decision.plan.route
        if m is None or route in (Route.FORCED, Route.PROBE, Route.UNSAFE):
            book.seen(mode, prompt, generated)
            return
        stats = book.replay(mode, prompt, generated, budget)
        obs = book.observe(
            decision.bucket, mode, m, stats, predicted_tok_s=decision.predicted_tok_s
        )
        if obs is None:
            return
        decision.counterfactual = {str(k): round(v, 2) for k, v in obs.speed.items()}
        log.info(
            "route.counterfactual",
            id=decision.rid,
            bucket=decision.bucket,
            mode=str(mode),
            actual_tok_s=round(obs.actual_tok_s, 1),
            predicted_tok_s=decision.predicted_tok_s,
            replay_error=round(obs.replay_error, 3),
            **{str(k).replace("-", "_"): round(v, 1) for k, v in obs.speed.items()},
        )
        self._version += 1

    def remember(self, key: str, mode: Mode, now: float) -> None:
        """Cache ``key`` → ``mode`` here, and for the other replicas when state is shared."""
        self.cache.put(key, mode, now)
        if self.store is not None:
            self.store.route_chosen(key, mode, self.cache.ttl_s)

    def settle_whole_probe(self, decision: Decision, mode: Mode) -> None:
        """A probe answered in full by its mode (swap residency, batches): judge and cache it.

        The whole answer's decode tok/s stands for the probe's, and wins against the
        floor's EMA with the usual margin. The prompt-hash cache then sends a repeat
        of this request to the winner, as after a probe with a hand-over. No-op for
        other routes, or before the answer's timings were recorded.
        """
        plan = decision.plan
        if plan.route is not Route.PROBE or decision.decode_tok_s is None or plan.floor is None:
            return
        decision.probe_tok_s = decision.decode_tok_s
        decision.floor_tok_s = plan.floor_tok_s
        floor = plan.floor_tok_s
        beats = floor is None or decision.decode_tok_s >= self.policy.margin * floor
        self.remember(decision.key, mode if beats else plan.floor, decision.started)
        self._version += 1

    def class_floor(self, cls: str, now: float) -> tuple[Mode, str]:
        """The floor of class ``cls`` now, and why, as :func:`plan_route` would pick it.

        Over the ready modes of the last plan, less the quarantined (and, with
        ``probe = "always"``, those on probation; all of the last plan's ready modes
        when that leaves none); the policy's floor before any plan.
        """
        ms = self.measurements
        policy = self.policy
        ready = self._ready or frozenset({policy.floor})
        out = {m for m in Mode if ms.quarantined(m, now)}
        if policy.probe == "always":  # as in plan(): probation only waits for a probe there
            out |= {m for m in Mode if ms.on_probation(m, now)}
        usable = [m for m in Mode if m in ready and m not in out] or [m for m in Mode if m in ready]
        floor = choose_floor(cls, usable, lambda m, c: ms.trusted_speed(m, c, now), policy)
        if floor == policy.floor:
            return floor, self.floor_why
        if policy.floor not in usable:
            return floor, f"{policy.floor}, the starting floor, is not usable now"
        return floor, f"measured ≥ {policy.margin}× {policy.floor} in this class"

    def _reference(self, mode: Mode, cls: str, now: float) -> Reference:
        speed = self.measurements.trusted_speed(mode, cls, now)
        if speed is not None:
            return Reference(str(mode), speed)
        fresh = self.measurements.summary(mode, cls, now).fresh
        why = f"{mode} has {fresh} of {MIN_TRUSTED_SAMPLES} fresh samples in class {cls}"
        return Reference(str(mode), None, why)

    def classes_snapshot(self, now: float) -> tuple[dict[str, Any], dict[str, Any]]:
        """Per class the floor, the mode chosen and the evidence; and the time saved.

        Returns:
            ``(classes, saved)``: ``classes`` maps each static class seen to
            ``{"floor", "floor_why", "last": {id, route, mode, class_floor}, "served":
            Served.as_dict(), "measured": {mode: SpeedSummary.as_dict()},
            "predicted": {bucket: {"samples", "decode_tok_s": {mode: tok/s}}},
            "saved": {"floor": s, "baseline": s}}`` (seconds or None); ``saved`` maps
            ``floor`` and ``baseline`` to :meth:`Saving.as_dict`
            (:func:`~fronde.router.savings.time_saved`).
        """
        ms = self.measurements
        names = sorted(set(ms.classes()) | set(self.served) | set(self.last_of_class))
        buckets: dict[str, Any] = (
            self.counterfactual.snapshot()["buckets"] if self.counterfactual is not None else {}
        )
        floors = {c: self.class_floor(c, now) for c in names}
        refs = {
            "floor": {c: self._reference(floors[c][0], c, now) for c in names},
            "baseline": {c: self._reference(Mode.BASELINE, c, now) for c in names},
        }
        saved = {k: time_saved(self.served, r) for k, r in refs.items()}
        classes: dict[str, Any] = {}
        for c in names:
            last = self.last_of_class.get(c)
            classes[c] = {
                "floor": str(floors[c][0]),
                "floor_why": floors[c][1],
                "last": None
                if last is None
                else {
                    "id": last.rid,
                    "route": str(last.plan.route),
                    "mode": str(last.winner or last.plan.mode),
                    "class_floor": str(last.class_floor) if last.class_floor else None,
                },
                "served": self.served.get(c, Served()).as_dict(),
                "measured": {
                    str(m): ms.summary(m, c, now).as_dict()
                    for m in Mode
                    if ms.summary(m, c, now).state != "unmeasured"
                },
                "predicted": {
                    b: {"samples": v["samples"], "decode_tok_s": v["decode_tok_s"]}
                    for b, v in buckets.items()
                    if b.split("|")[0] == c
                },
                "saved": {k: s.by_class.get(c) for k, s in saved.items()},
            }
        return classes, {k: s.as_dict() for k, s in saved.items()}

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready state for ``GET /fronde/v1/router``.

        ``classes`` and ``saved``: see :meth:`classes_snapshot`.
        """
        now = time.monotonic() if now is None else now
        classes, saved = self.classes_snapshot(now)
        return {
            "policy": {
                "probe_tokens": self.policy.probe_tokens,
                "margin": self.policy.margin,
                "aggressive": [str(m) for m in self.policy.aggressive],
                "floor_candidates": [str(m) for m in self.policy.floor_candidates],
                "edit_mode": str(self.policy.edit_mode),
                "load_rule": self.policy.load_rule,
                "floor": str(self.policy.floor),
                "floor_why": self.floor_why,
                "probe": self.policy.probe,
                "probe_min_tokens": self.policy.probe_min_tokens,
                "predict": self.policy.predict,
                "predict_band": self.policy.predict_band,
                "load_band": self.policy.load_band,
                "load_placement": self.policy.load_placement,
                "slots": self.slots,
                "collapses_judged": self.measurements.alone,
            },
            "load": {
                "rule": self.policy.load_rule,
                "why": self.load_why,
                "curves": self.load_curves.as_dict() if self.load_curves is not None else None,
            },
            "counterfactual": (
                self.counterfactual.snapshot() if self.counterfactual is not None else None
            ),
            "modes": self.measurements.snapshot(now),
            "in_flight": {str(m): n for m, n in self.in_flight.items() if n},
            "cache": {"entries": len(self.cache), "max_entries": self.cache.max_entries},
            "recent": [d.as_dict(now) for d in list(self.recent)[-20:]],
            "shared": self.store.snapshot() if self.store is not None else None,
            "classes": classes,
            "saved": saved,
        }


def measurements_from(settings: Settings) -> Measurements:
    """The EMA and quarantine book ``settings.router`` describes.

    Collapses are judged only where one generation decodes at a time (a decode gate
    of 1: :meth:`~fronde.config.Settings.effective_max_parallel_decodes`); with
    parallel slots a request's speed is the batch's (:mod:`fronde.router.measure`).
    """
    r = settings.router
    alone = settings.effective_max_parallel_decodes() == 1
    return Measurements(r.ema_alpha, r.collapse, r.quarantine_s, r.draft_cost, alone=alone)


def cache_from(settings: Settings) -> RouteCache:
    """The prompt-hash cache ``settings.router`` describes."""
    return RouteCache(settings.router.cache_max_entries, settings.router.cache_ttl_s)
