"""What the swap scheduler asks of the pool, and what it hands a request.

:class:`~fronde.backends.swap.SwapScheduler` (the one owner of residency) starts and
stops backends through a :class:`SwapPool`; it queues a :class:`Waiter` per request
and resolves it with a :class:`Lease` on a resident mode, or with
:class:`SwapWaitError` (HTTP 503) past the wait bound.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol, Required, TypedDict

from fronde.errors import BackendUnavailableError
from fronde.modes import Mode

__all__ = ["Lease", "SwapPool", "SwapRecord", "SwapWaitError", "Waiter"]


SwapRecord = TypedDict(
    "SwapRecord",
    {
        "from": Required[str | None],
        "to": Required[str],
        "stop_s": float,
        "ok": bool,
        "error": str,
        "seconds": float,
    },
    total=False,
)
"""One finished swap, for the history, the log and the metrics: the mode stopped
(``from``, None when a slot was free) and the one started (``to``), seconds to stop
(``stop_s``) and in all (``seconds``), whether it worked (``ok``) and why not
(``error``). Functional syntax: ``from`` is a Python keyword."""


class SwapWaitError(BackendUnavailableError):
    """A request waited ``max_wait_s`` for its mode and no fallback was allowed (HTTP 503)."""

    code = "mode_not_resident"


class SwapPool(Protocol):
    """What the scheduler needs from the pool (:class:`~fronde.backends.pool.BackendPool`)."""

    def is_ready(self, mode: Mode) -> bool:
        """True when ``mode``'s llama-server answers."""
        ...

    async def start_mode(self, mode: Mode) -> None:
        """Start ``mode``'s llama-server and supervise it; raise BackendStartError."""
        ...

    async def stop_mode(self, mode: Mode) -> None:
        """Stop ``mode``'s llama-server (SIGTERM, grace, SIGKILL, reap)."""
        ...


@dataclass(eq=False)
class Lease:
    """Permission to use ``mode``'s backend until :meth:`SwapScheduler.release`.

    Attributes:
        mode: the mode granted (resident until released).
        asked: the mode the request asked for; differs from ``mode`` on a fallback.
        waited_s: time from the request's arrival to the grant, seconds.
    """

    mode: Mode
    asked: Mode
    waited_s: float
    released: bool = False

    @property
    def fallback(self) -> bool:
        """True when the request is served by another mode than it asked for."""
        return self.mode is not self.asked


@dataclass(eq=False)
class Waiter:
    """A request waiting in its mode's queue: when it came, and the future its lease resolves."""

    mode: Mode
    arrived: float
    future: asyncio.Future[Lease] = field(repr=False)
    may_fall_back: bool = True
