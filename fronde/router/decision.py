"""A routed request's record: its :class:`Decision` and its :data:`Status`.

The decision is the plan and what was measured of it: one per request, made by
:meth:`~fronde.router.engine.Router.plan`, filled in by the request's life
(:mod:`fronde.request`) and the router's ``record``; the recent ones are the rows of
``/fronde/v1/router``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from fronde.evidence.measurement import Measurement
from fronde.modes import Mode
from fronde.router.classify import RequestClass
from fronde.router.plan import Plan, Route

__all__ = ["NOT_ROUTED", "Decision", "DecisionRow", "Status", "rounded"]


Status = Literal["waiting", "running", "done", "error", "cancelled"]
"""A request's state: waiting (for its mode to be resident, or for a decode slot),
answering, answered, failed (HTTP or in-band error), client gone."""


DecisionRow = TypedDict(
    "DecisionRow",
    {
        "id": str,
        "at": float,
        "status": Status,
        "error": str | None,
        "elapsed_s": float,
        "class": str,
        "static_class": str,
        "mode": str,
        "probed": str | None,
        "probe_tok_s": float | None,
        "floor": str | None,
        "floor_tok_s": float | None,
        "class_floor": str | None,
        "decode_tok_s": float | None,
        "live_tok_s": float | None,
        "streamed": int,
        "alpha": float | None,
        "tau": float | None,
        "tokens": int | None,
        "queued_ms": float | None,
        "overhead_ms": float | None,
        "bucket": str,
        "predicted_tok_s": float | None,
        "predicted": dict[str, float],
        "counterfactual": dict[str, float],
        "draft_n_max": int | None,
    },
)
"""One request in the recent list and the ``request.finished`` log line
(:meth:`Decision.as_dict`); functional syntax: ``class`` is a Python keyword."""


@dataclass
class Decision:
    """A planned request and what was measured of it (one row of the recent list).

    Times are ``time.monotonic()`` seconds unless named ``_ms``. ``streamed``
    counts the events relayed to the client so far (llama-server sends one per
    token), which gives the live decode tok/s of a running stream. ``class_floor``:
    for a ``fallback`` route, the class's floor when it was planned (the live page
    says "floor" when the request went there, "fallback" when a load rule sent it
    elsewhere). ``constrained``: its output is held to a grammar
    (:func:`~fronde.router.classify.constrained`), so its speed is not judged a collapse.
    ``draft_n_max``: the ``speculative.n_max`` Fronde set from the draft length by load
    (:mod:`fronde.router.draft_length`), None when it set none.
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
    constrained: bool = False
    draft_n_max: int | None = None

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

    def as_dict(self, now: float | None = None) -> DecisionRow:
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
            "draft_n_max": self.draft_n_max,
        }


NOT_ROUTED = (Route.FORCED, Route.UNSAFE)
"""Routes left out of the time saved: the client, or a correctness rule, chose the mode."""


def rounded(value: float | None, digits: int) -> float | None:
    """``value`` rounded to ``digits``, or None."""
    return None if value is None else round(value, digits)
