"""What the router asks of its collaborators: a state store and an event sink.

A :class:`StateStore` is shared with other replicas, a :class:`RouterEvents` sink is the
metrics; both are given to the :class:`~fronde.router.engine.Router` by its constructor.
"""

from __future__ import annotations

from typing import Protocol, TypedDict

from fronde.evidence.measurement import Measurement
from fronde.modes import Mode
from fronde.timings import Timings

__all__ = ["RouterEvents", "StateStore", "StoreView"]


class StoreView(TypedDict):
    """The shared store in ``/fronde/v1/router``: its ``url``, key ``namespace``, health."""

    url: str
    namespace: str
    healthy: bool


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

    def snapshot(self) -> StoreView:
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
