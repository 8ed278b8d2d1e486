"""The router's state and its two verbs: plan a request, record a result.

One :class:`Router` per app owns the measurements, the prompt-hash cache and the
in-flight counts; the policy itself is the pure :func:`~fronde.router.policy.plan_route`.
Everything runs on the event loop, so no locking is needed. What it tells the outside
(metrics) goes through a :class:`RouterEvents` sink and what it shares with other
replicas through a :class:`StateStore`, both given to its constructor; the dispatcher
(:mod:`fronde.request`) is the only caller of its verbs.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import Collection

from fronde.evidence.bucket import bucket_of
from fronde.evidence.calibration import LoadCurves
from fronde.evidence.counterfactual import Counterfactual
from fronde.evidence.measure import Measurements
from fronde.evidence.measurement import MIN_TOKENS, Measurement
from fronde.evidence.savings import Served
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.router.cache import RouteCache
from fronde.router.classify import RequestClass
from fronde.router.decision import NOT_ROUTED, Decision, Status, rounded
from fronde.router.draft_length import DraftLengths
from fronde.router.plan import Route, RouterPolicy, Situation
from fronde.router.policy import plan_route
from fronde.router.ports import RouterEvents, StateStore
from fronde.router.views import RouterViews
from fronde.timings import Timings

__all__ = ["Decision", "Router", "RouterEvents", "StateStore", "Status"]
# Defined in decision.py and ports.py, and named here too as the router's public face.

log = get_logger(__name__)

RECENT_KEPT = 200
"""Recent routing decisions kept for ``/fronde/v1/router``."""


def _mirror_only(decision: Decision) -> bool:
    """Whether the book takes the answer only into its mirrors (:meth:`Router.observe`)."""
    route = decision.plan.route
    return decision.measurement is None or route in (Route.FORCED, Route.PROBE, Route.UNSAFE)


class Router(RouterViews):
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
        counterfactual: the counterfactual book (:mod:`fronde.evidence.counterfactual`),
            or None to route without it.
        load_curves: measured load curves for the ``measured`` load rule, or None.
        load_why: where ``load_curves`` came from, for ``/fronde/v1/router``.
        draft_lengths: the draft length by load on the shared server (none by default).
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
        draft_lengths: DraftLengths | None = None,
    ) -> None:
        self.policy = policy or RouterPolicy()
        self.draft_lengths = draft_lengths or DraftLengths(None, {}, "none")
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
        # Routed requests per static class, for the time saved (fronde.evidence.savings).
        self.served: dict[str, Served] = {}
        self.last_of_class: dict[str, Decision] = {}
        self._ready: frozenset[Mode] = frozenset()  # the ready modes of the last plan

    @property
    def version(self) -> int:
        """Grows on every change a viewer would see (``/fronde/v1/events`` polls it)."""
        return self._version + (self.store.version if self.store is not None else 0)

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
        constrained: bool = False,
    ) -> Decision:
        """Plan one request (see :func:`~fronde.router.policy.plan_route`) and remember it.

        ``budget`` is the request's token budget (None: open), for the probe policy;
        ``overlap`` its prompt's self-overlap
        (:func:`~fronde.evidence.counterfactual.self_overlap`), for its bucket;
        ``arriving_self``: this request is counted in :attr:`arriving` (the plan reads
        the others); ``constrained``: its output is held to a grammar
        (:attr:`Decision.constrained`).
        """
        now = time.monotonic() if now is None else now
        ms = self.measurements
        # Probation waits for a probe; where the probe policy may never probe, an
        # expired quarantine just ends.
        quarantined, on_probation = ms.held_out(now)
        probation = on_probation if self.policy.probe == "always" else set[Mode]()
        cached = self.cache.get(key, now, excluded=quarantined | probation)
        bucket = bucket_of(str(cls), overlap)
        book = self.counterfactual
        speedups = book.speedups(bucket) if book is not None else {}
        misses = self.policy.predict_misses  # the book's own misses raise a mode's bar
        miss_bar = misses == "always" or (misses == "parallel" and self.slots > 1)
        errors = book.mode_errors() if book is not None and miss_bar else None
        at = Situation(
            ready=ready,
            speed=lambda mode, c: ms.trusted_speed(mode, c, now),
            policy=self.policy,
            budget=budget,
            forced=forced,
            cached=cached,
            quarantined=quarantined,
            probation=probation,
            busy={m for m, n in self.in_flight.items() if n >= self.slots},
            active=set() if self.swap_residency else {m for m, n in self.in_flight.items() if n},
            speedups=speedups,
            errors=errors,
            sure=book.sure_gains(bucket, self.policy.predict_sigmas) if book else None,
            in_flight=self.in_flight,
            arriving=self.arriving - 1 if arriving_self else self.arriving,
            curves=self.load_curves,
            slots=self.slots,
        )
        plan = plan_route(cls, at)
        decision = Decision(plan, cls, key, now, rid=f"r{next(self._ids)}", bucket=bucket)
        decision.constrained = constrained
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
            probe_tok_s=rounded(row["probe_tok_s"], 1),
            floor_tok_s=rounded(row["floor_tok_s"], 1),
            decode_tok_s=rounded(row["decode_tok_s"], 1),
            alpha=rounded(row["alpha"], 3),
            tau=rounded(row["tau"], 2),
            tokens=row["tokens"],
            overhead_ms=rounded(row["overhead_ms"], 3),
            queued_ms=rounded(row["queued_ms"], 1),
            predicted_tok_s=row["predicted_tok_s"],
            elapsed_s=row["elapsed_s"],
            error=error,
        )
        if self.events is not None:
            self.events.finished(decision.overhead_ms, probed, won)
        served = self.served.get(str(decision.cls))
        routed = decision.plan.route not in NOT_ROUTED
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
        if decision.plan.route not in NOT_ROUTED and m.decode_ms > 0:
            # Every segment's time counts, a collapsed one too: it was spent.
            served = self.served.setdefault(str(decision.cls), Served())
            served.add(str(mode), m.tokens, m.decode_ms / 1000.0)
        judged = not decision.constrained  # a grammar's cost per step is no collapse
        collapsed = feeds and self.measurements.record(mode, str(decision.cls), m, now, judged)
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

    def learns_from(self, decision: Decision, mode: Mode) -> bool:
        """Whether :meth:`observe` would change the book for this answer on ``mode``.

        Not without a book, nor with one of fewer than two replayable modes (nothing to
        compare; its ``/tokenize`` calls and event parse cost 0.03 ms CPU a token on 2
        cores), nor for one it only shows to the mirror of its server's table (forced,
        probed, unsafe-for-spec, unmeasured) when ``mode`` keeps no table (baseline,
        ngram-simple): then its token ids need not be fetched (hindsight).
        """
        book = self.counterfactual
        if book is None or not book.compares:
            return False
        return not _mirror_only(decision) or mode in book.mirrors

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
        if m is None or _mirror_only(decision):  # m: narrowed for the type checker
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
