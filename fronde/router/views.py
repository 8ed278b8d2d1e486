"""What the router shows: floors, evidence and time saved per class; ``/fronde/v1/router``.

:class:`RouterViews` is a base of :class:`~fronde.router.engine.Router`: it reads the
router's state and changes none of it.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

from fronde.evidence.calibration import LoadCurves
from fronde.evidence.counterfactual import Counterfactual
from fronde.evidence.measure import Measurements
from fronde.evidence.measurement import MIN_TRUSTED_SAMPLES
from fronde.evidence.savings import Reference, Served, time_saved
from fronde.modes import Mode
from fronde.router.cache import RouteCache
from fronde.router.decision import Decision
from fronde.router.draft_length import DraftLengths
from fronde.router.plan import RouterPolicy
from fronde.router.policy import choose_floor
from fronde.router.ports import StateStore

__all__ = ["RouterViews"]


class RouterViews:
    """The read-only views of a router's state (the attributes are the router's own)."""

    policy: RouterPolicy
    measurements: Measurements
    floor_why: str
    counterfactual: Counterfactual | None
    load_curves: LoadCurves | None
    load_why: str
    draft_lengths: DraftLengths
    served: dict[str, Served]
    last_of_class: dict[str, Decision]
    in_flight: Counter[Mode]
    cache: RouteCache
    recent: deque[Decision]
    store: StateStore | None
    slots: int
    _ready: frozenset[Mode]

    def class_floor(self, cls: str, now: float) -> tuple[Mode, str]:
        """The floor of class ``cls`` now, and why, as :func:`plan_route` would pick it.

        Over the ready modes of the last plan, less the quarantined (and, with
        ``probe = "always"``, those on probation; all of the last plan's ready modes
        when that leaves none); the policy's floor before any plan.
        """
        ms = self.measurements
        policy = self.policy
        ready = self._ready or frozenset({policy.floor})
        out, on_probation = ms.held_out(now)
        if policy.probe == "always":  # as in plan(): probation only waits for a probe there
            out |= on_probation
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
            (:func:`~fronde.evidence.savings.time_saved`).
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
                "draft_lengths": self.draft_lengths.snapshot(),
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
