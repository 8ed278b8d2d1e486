"""One request's claim on what serves it: the decode gate, in-flight counts, a swap lease.

An :class:`Admission` is taken when a request has been planned and given back when
its answer ends (the last byte of a stream, an error, or the client leaving). It is
the only writer of its decision's status (``waiting`` → ``running`` → ``done``,
``error`` or ``cancelled``) and of the in-flight counts, so that what
``/fronde/v1/router`` and the metrics show always matches what holds a backend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager

from fronde.backends.affinity import Affinity
from fronde.modes import Mode
from fronde.router.engine import Decision, Router, Status

__all__ = ["Admission", "Arrival"]

# A timer may fire up to a millisecond early (uvloop rounds to ms): close enough.
_TIMER_SLACK_S = 0.001


class Arrival:
    """One request from its arrival until it is in flight, counted in ``router.arriving``.

    Under the ``measured`` load rule the requests received and not yet in flight
    (being planned, or waiting for residency or a slot) count in the load a placement
    reads (:func:`~fronde.router.policy.plan_route`'s
    ``arriving``): clients that start at once are placed for the load they make
    together, not each for the load of those planned before it. Measured on the
    H200 (gemma, ``results/load-gpu-h200-cpu-gemma-270m-20261203-bs2``, c = 32): with
    the count at plan time only, 22 of the 100 requests went to ngram-mod's server as
    the clients started, where the load measured from then on wanted baseline's.

    Args:
        router: the router whose ``arriving`` count this request is in until
            :meth:`close` (its admission's first generation counted in flight, or its
            end).
    """

    def __init__(self, router: Router) -> None:
        self.router = router
        self._open = True
        router.arriving += 1
        self.t0 = time.monotonic()
        self.previous = router.last_arrival  # the arrival before this one, s (monotonic)
        self.after_end = router.last_end  # the last request's end before this one, s
        self.waited_s = 0.0  # how long :meth:`gathered` held it, s
        router.last_arrival = self.t0

    async def gathered(self, quiet_s: float, most_s: float) -> None:
        """Wait, if this request came in a burst, until the burst has arrived.

        A request that arrives within ``quiet_s`` seconds of the one before it waits
        until no request has arrived for ``quiet_s`` (at most ``most_s`` from its own
        arrival), unless a request ended within ``quiet_s`` before it came (a client
        coming back as its answer ends: the load it joins is counted already, and a
        closed loop's clients would otherwise wait at every answer that ends with
        another); any other yields one turn of the event loop. Either way the requests
        that came with it are counted in ``router.arriving`` before it is placed. On
        the H200 the load bench's clients started 22 requests in 14 ms: without the
        wait, each one counted only those that arrived before it was planned
        (``router.gather_ms``; ``scripts/load_burst.py`` measures it). A lone request
        (one client) never waits.

        Args:
            quiet_s: the gap that ends a burst, s (0: never wait).
            most_s: the longest this request waits, s.

        The time it held the request is left in :attr:`waited_s` (the
        ``x-fronde-gather-ms`` header).
        """
        start = time.monotonic()
        try:
            await self._gather(quiet_s, most_s)
        finally:
            self.waited_s = time.monotonic() - start

    async def _gather(self, quiet_s: float, most_s: float) -> None:
        """:meth:`gathered`'s wait."""
        await asyncio.sleep(0)
        if quiet_s <= 0 or self.previous is None or self.t0 - self.previous > quiet_s:
            return
        if self.after_end is not None and self.t0 - self.after_end <= quiet_s:
            return
        deadline = self.t0 + most_s
        while (now := time.monotonic()) < deadline - _TIMER_SLACK_S:
            wake = (self.router.last_arrival or self.t0) + quiet_s
            if wake - now <= _TIMER_SLACK_S:
                return
            await asyncio.sleep(min(wake, deadline) - now)

    def close(self) -> None:
        """In flight, or ended: out of the count; only the first call counts."""
        if self._open:
            self._open = False
            self.router.arriving -= 1


class Admission:
    """One request's hold on the router's decode gate and its backend, released once.

    Args:
        router: the router whose gate, in-flight counts and recent decisions it uses.
        decision: the planned request, or None for a call that is not routed (the
            native ``/completion`` pass-through takes a decode slot all the same).
        arrival: the request's count among those not yet in flight, closed when it is
            (:meth:`count`) or when the admission is released.

    Attributes:
        affinity: which remote host each of its upstream calls goes to, and the hosts it
            failed on (:class:`~fronde.backends.affinity.Affinity`).
    """

    def __init__(
        self, router: Router, decision: Decision | None = None, arrival: Arrival | None = None
    ) -> None:
        self.router = router
        self.decision = decision
        self._arrival = arrival
        self._t0 = time.monotonic()
        self._gate_held = False
        self._after: list[Callable[[], None]] = []
        self._uncounts: list[Callable[[], None]] = []
        self.affinity = Affinity()

    def on_release(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once when the admission is released (e.g. give a lease back)."""
        self._after.append(callback)

    async def take_slot(self) -> None:
        """Wait for a decode slot; the decision runs from now (its wait is recorded)."""
        await self.router.gate.acquire()
        self._gate_held = True
        if self.decision is not None:
            self.router.begin(self.decision, (time.monotonic() - self._t0) * 1000)

    def count(self, mode: Mode) -> Callable[[], None]:
        """Count one generation in flight on ``mode``; return its idempotent uncount."""
        if self._arrival is not None:
            self._arrival.close()  # in flight now: no longer arriving
        self.router.in_flight[mode] += 1
        done = False

        def uncount() -> None:
            nonlocal done
            if not done:
                done = True
                self.router.in_flight[mode] -= 1

        self._uncounts.append(uncount)
        return uncount

    @contextmanager
    def generating(self, mode: Mode) -> Generator[None]:
        """Count a generation on ``mode`` in flight for the block."""
        uncount = self.count(mode)
        try:
            yield
        finally:
            uncount()

    def progress(self, events: int = 1) -> None:
        """``events`` more events streamed to the client (live tok/s)."""
        if self.decision is not None:
            self.router.progress(self.decision, events)

    def release(self) -> None:
        """Out of flight, the decode slot back, the :meth:`on_release` callbacks run; once.

        A generation still counted in flight is uncounted here: a stream releases its
        admission when ``[DONE]`` passes, before the client reads it, so that a client
        that sends its next request at once finds its last one out of the load.
        """
        if self._arrival is not None:
            self._arrival.close()
        uncounts, self._uncounts = self._uncounts, []
        for uncount in uncounts:
            uncount()
        if self.decision is not None:
            self.router.last_end = time.monotonic()
        if self._gate_held:
            self._gate_held = False
            self.router.gate.release()
        after, self._after = self._after, []
        for callback in after:
            callback()

    def finish(self, status: Status, error: str | None = None) -> None:
        """End the decision with ``status`` (only the first call counts)."""
        if self.decision is not None:
            self.router.finish(self.decision, status, error)

    def close(self, status: Status, error: str | None = None) -> None:
        """:meth:`release`, then :meth:`finish`."""
        self.release()
        self.finish(status, error)
