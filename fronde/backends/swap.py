"""Swap residency: at most N llama-servers up, mode changes batched into epochs.

On the seed's 8 GB GPU one copy of the 8B target fits, so changing mode means
stopping one llama-server and starting another, which costs seconds. A swap per
request would cost more than speculation gains, and requests from several agents
interleave modes (llama-swap #588 reports the thrash). The scheduler therefore:

- queues a request whose mode is not resident, one FIFO queue per mode;
- serves the resident modes' queues for up to ``max_epoch_s`` (an **epoch**) while
  other modes wait, then swaps to the mode whose oldest request has waited
  longest; a resident mode with nothing to do is swapped out at once;
- bounds every wait by ``max_wait_s``: past it, the request is served by a
  resident mode (``fallback``) or refused with 503 and ``Retry-After``;
- never loses a request when a swap fails: the failed mode's waiters fall back or
  get a 503, and the previous mode is started again so that something serves.

``policy = "fifo"`` is the comparison point: strict arrival order, a swap at every
mode change.

States (one owner: the scheduler's loop task mutates residency; ``acquire`` and
``release`` only queue and count, then wake it)::

    mode:  stopped ──swap in──▶ resident(open) ──epoch over──▶ draining ──idle──▶ stopped
                                     ▲  grants leases              no new leases
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

from fronde.backends.swap_ports import Lease, SwapPool, SwapRecord, SwapWaitError, Waiter
from fronde.errors import BackendStartError, ModeUnavailableError
from fronde.logging import get_logger
from fronde.modes import Mode

__all__ = ["FAILED_RETRY_S", "SwapScheduler"]

log = get_logger(__name__)

FAILED_RETRY_S = 30.0
"""A mode whose swap-in failed is not tried again for this long, seconds."""

HISTORY_KEPT = 50
"""Swaps kept for ``/fronde/v1/router``."""


class SwapScheduler:
    """Owns which modes are resident, the per-mode queues and the swaps.

    Args:
        pool: starts and stops backends.
        modes: the modes that may be swapped in, in preference order (the first
            ``max_resident`` start resident).
        max_resident: llama-servers up at once.
        max_epoch_s: an epoch's length while other modes wait, seconds.
        max_wait_s: the bound on any request's wait, seconds.
        fallback: past ``max_wait_s``, serve from a resident mode instead of a 503.
        policy: ``epoch`` or ``fifo``.
        clock: monotonic seconds (tests pass their own).
        on_swap: called with each finished swap's record (metrics).
    """

    def __init__(
        self,
        pool: SwapPool,
        modes: Sequence[Mode],
        *,
        max_resident: int = 1,
        max_epoch_s: float = 30.0,
        max_wait_s: float = 120.0,
        fallback: bool = True,
        policy: Literal["epoch", "fifo"] = "epoch",
        clock: Callable[[], float] = time.monotonic,
        on_swap: Callable[[SwapRecord], None] | None = None,
    ) -> None:
        if not modes:
            raise ValueError("swap residency needs at least one mode")
        self.pool = pool
        self.modes = list(modes)
        self.max_resident = max_resident
        self.max_epoch_s = max_epoch_s
        self.max_wait_s = max_wait_s
        self.fallback = fallback
        self.policy = policy
        self.clock = clock
        self.on_swap = on_swap
        self.resident: list[Mode] = []
        self.draining: set[Mode] = set()
        self.epoch_started: dict[Mode, float] = {}
        self.queues: dict[Mode, deque[Waiter]] = {m: deque() for m in self.modes}
        self.active: Counter[Mode] = Counter()
        self.failed_until: dict[Mode, float] = {}
        self.swaps = 0
        self.swap_failures = 0
        self.fallbacks = 0
        self.refusals = 0
        self.history: deque[SwapRecord] = deque(maxlen=HISTORY_KEPT)
        self._swapping: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closed = False

    # --- the request side ---------------------------------------------------------

    def available(self) -> list[Mode]:
        """Modes a request may be routed to: swappable and not in a failure back-off."""
        now = self.clock()
        return [m for m in self.modes if self.failed_until.get(m, 0.0) <= now]

    async def acquire(self, mode: Mode, *, fallback: bool = True) -> Lease:
        """Wait until ``mode`` is resident (or the wait bound passes); return a lease.

        Args:
            mode: the mode the request needs.
            fallback: whether this request may be served by another resident mode past
                ``max_wait_s`` (when ``swap.fallback`` allows it). False for requests
                that only baseline may serve (unsafe-for-spec): those get the 503.

        Raises:
            ModeUnavailableError: ``mode`` is not one of the swappable modes.
            SwapWaitError: ``max_wait_s`` passed and no fallback was allowed or possible.
        """
        if mode not in self.queues:
            raise ModeUnavailableError(f"mode {mode} is not available in this pool", param="model")
        future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        waiter = Waiter(mode, self.clock(), future, fallback)
        self.queues[mode].append(waiter)
        self._wake.set()
        try:
            return await future
        except asyncio.CancelledError:
            # The client left while waiting: drop it, or give back what it was granted.
            with contextlib.suppress(ValueError):
                self.queues[mode].remove(waiter)
            if future.done() and not future.cancelled() and future.exception() is None:
                self.release(future.result())
            raise

    def release(self, lease: Lease) -> None:
        """Give ``lease`` back (idempotent); a draining mode may then be swapped out."""
        if lease.released:
            return
        lease.released = True
        self.active[lease.mode] -= 1
        self._wake.set()

    # --- the loop -----------------------------------------------------------------

    async def start(self) -> None:
        """Start the first ``max_resident`` modes (those that come up) and the loop."""
        for mode in self.modes[: self.max_resident]:
            try:
                await self.pool.start_mode(mode)
            except BackendStartError as exc:
                self.failed_until[mode] = self.clock() + FAILED_RETRY_S
                log.error("swap.start_failed", mode=str(mode), error=exc.message)
                continue
            self.resident.append(mode)
            self.epoch_started[mode] = self.clock()
        self._loop_task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        """Stop the loop; waiting requests get a 503 (the pool stops the backends)."""
        self._closed = True
        for task in (self._loop_task, self._swapping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for queue in self.queues.values():
            while queue:
                w = queue.popleft()
                if not w.future.done():
                    w.future.set_exception(SwapWaitError("Fronde is shutting down"))

    async def _loop(self) -> None:
        while not self._closed:
            self._wake.clear()
            timeout = self.dispatch()
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow a
            # cancellation that lands as the event is set (bpo-42130), and the
            # loop would then outlive stop().
            woken = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({woken}, timeout=timeout)
            finally:
                woken.cancel()

    def dispatch(self) -> float:
        """One scheduling pass: grant, time out, and decide a swap.

        Returns:
            Seconds until the next deadline (a wait bound or an epoch's end), at most 1.
        """
        now = self.clock()
        self._expire(now)
        if self.policy == "fifo":
            self._grant_fifo(now)
        else:
            self._grant_epoch(now)
        self._maybe_swap(now)
        return self._next_deadline(now)

    def _open(self, mode: Mode) -> bool:
        return mode in self.resident and mode not in self.draining and self.pool.is_ready(mode)

    def _grant(self, waiter: Waiter, mode: Mode, now: float) -> None:
        self.active[mode] += 1
        waiter.future.set_result(Lease(mode, waiter.mode, now - waiter.arrived))

    def _contended(self) -> bool:
        """Requests wait for a mode that is not resident, and no slot is free."""
        if len(self.resident) < self.max_resident:
            return False
        return any(q and m not in self.resident for m, q in self.queues.items())

    def _grant_epoch(self, now: float) -> None:
        contended = self._contended()
        for mode in self.resident:
            if not self._open(mode):
                continue
            if contended and now - self.epoch_started[mode] >= self.max_epoch_s:
                continue  # the epoch is over: new requests wait for this mode's next one
            queue = self.queues[mode]
            while queue:
                self._grant(queue.popleft(), mode, now)

    def _grant_fifo(self, now: float) -> None:
        while True:
            head = self._oldest()
            if head is None or not self._open(head.mode):
                return
            self.queues[head.mode].popleft()
            self._grant(head, head.mode, now)

    def _oldest(self) -> Waiter | None:
        heads = [q[0] for q in self.queues.values() if q]
        return min(heads, key=lambda w: w.arrived) if heads else None

    def _expire(self, now: float) -> None:
        """Fall back or refuse every waiter past the wait bound or whose mode failed."""
        for mode, queue in self.queues.items():
            failed = self.failed_until.get(mode, 0.0) > now
            keep: deque[Waiter] = deque()
            for w in queue:
                if w.future.done():
                    continue
                spare = next((m for m in self.resident if self._open(m)), None)
                over = now - w.arrived >= self.max_wait_s
                # After a failed swap the previous mode is being started again: a
                # waiter that may fall back waits for it (within its bound).
                may_fall_back = self.fallback and w.may_fall_back
                restoring = may_fall_back and spare is None and self._swapping is not None
                if not over and (not failed or restoring):
                    keep.append(w)
                    continue
                if may_fall_back and spare is not None:
                    self.fallbacks += 1
                    log.warning(
                        "swap.fallback",
                        asked=str(mode),
                        mode=str(spare),
                        waited_s=round(now - w.arrived, 2),
                    )
                    self._grant(w, spare, now)
                else:
                    self.refusals += 1
                    why = "its swap-in failed" if failed else f"waited {self.max_wait_s:g} s"
                    err = SwapWaitError(f"mode {mode} is not resident ({why}); retry later")
                    w.future.set_exception(err)
            self.queues[mode] = keep

    def _maybe_swap(self, now: float) -> None:
        if self._swapping is not None:
            return
        waiting = [m for m, q in self.queues.items() if q and m not in self.resident]
        if not waiting:
            return
        if self.policy == "fifo":
            head = self._oldest()
            target = head.mode if head is not None and head.mode not in self.resident else None
            if target is None:
                return
        else:
            target = min(waiting, key=lambda m: self.queues[m][0].arrived)
        if len(self.resident) < self.max_resident:
            self._launch(None, target)
            return
        if not self.draining:
            victim = self._victim(now)
            if victim is None:
                return
            self.draining.add(victim)
            log.info("swap.draining", mode=str(victim), for_mode=str(target))
        victim = next(iter(self.draining))
        if self.active[victim] == 0:
            self._launch(victim, target)

    def _victim(self, now: float) -> Mode | None:
        """The resident mode to swap out: idle, or (epoch policy) past its epoch."""
        if self.policy == "fifo":
            return min(self.resident, key=lambda m: self.epoch_started[m])
        done = [
            m
            for m in self.resident
            if (not self.queues[m] and self.active[m] == 0)
            or now - self.epoch_started[m] >= self.max_epoch_s
        ]
        return min(done, key=lambda m: self.epoch_started[m]) if done else None

    def _next_deadline(self, now: float) -> float:
        deadlines = [w.arrived + self.max_wait_s for q in self.queues.values() for w in q]
        if self._contended():
            deadlines += [self.epoch_started[m] + self.max_epoch_s for m in self.resident]
        soonest = min(deadlines, default=now + 1.0)
        return min(1.0, max(0.001, soonest - now))

    def _launch(self, victim: Mode | None, target: Mode) -> None:
        self._swapping = asyncio.create_task(self._swap(victim, target))

    async def _swap(self, victim: Mode | None, target: Mode) -> None:
        """Stop ``victim`` (if any), start ``target``; on failure start ``victim`` again."""
        t0 = self.clock()
        record: SwapRecord = {"from": str(victim) if victim else None, "to": str(target)}
        try:
            if victim is not None:
                await self.pool.stop_mode(victim)
                self.resident.remove(victim)
                self.draining.discard(victim)
            record["stop_s"] = round(self.clock() - t0, 3)
            try:
                await self.pool.start_mode(target)
            except BackendStartError as exc:
                self.swap_failures += 1
                self.failed_until[target] = self.clock() + FAILED_RETRY_S
                record["ok"], record["error"] = False, exc.message
                log.error("swap.failed", **record)
                if victim is not None and not self.resident:
                    await self._restore(victim)
            else:
                self.resident.append(target)
                self.epoch_started[target] = self.clock()
                record["ok"] = True
            record["seconds"] = round(self.clock() - t0, 3)
            self.swaps += 1
            self.history.append(record)
            log.info("swap.done", **record)
            if self.on_swap is not None:
                self.on_swap(record)
        finally:
            self._swapping = None
            self._wake.set()

    async def _restore(self, mode: Mode) -> None:
        """Start ``mode`` again after a failed swap, so that something serves."""
        try:
            await self.pool.start_mode(mode)
        except BackendStartError as exc:
            log.error("swap.restore_failed", mode=str(mode), error=exc.message)
            return
        self.resident.append(mode)
        self.epoch_started[mode] = self.clock()

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready state for ``/fronde/v1/router``: residency, queues, swaps."""
        now = self.clock()
        return {
            "policy": self.policy,
            "max_resident": self.max_resident,
            "max_epoch_s": self.max_epoch_s,
            "max_wait_s": self.max_wait_s,
            "resident": [str(m) for m in self.resident],
            "draining": [str(m) for m in self.draining],
            "epoch_age_s": {str(m): round(now - self.epoch_started[m], 2) for m in self.resident},
            "queues": {str(m): len(q) for m, q in self.queues.items()},
            "oldest_wait_s": {
                str(m): round(now - q[0].arrived, 2) for m, q in self.queues.items() if q
            },
            "active": {str(m): n for m, n in self.active.items() if n},
            "swapping": self._swapping is not None,
            "swaps": self.swaps,
            "swap_failures": self.swap_failures,
            "fallbacks": self.fallbacks,
            "refusals": self.refusals,
            "history": list(self.history)[-10:],
        }
