"""The swap scheduler over a fake pool: epochs, the wait bound, failed swaps.

The fake pool starts and stops "backends" with a sleep and records every swap, so
the counts for a known arrival sequence are exact. The real swap between two
gemma llama-servers is in tests/integration/test_swap_real.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fronde.backends.swap import SwapScheduler
from fronde.backends.swap_ports import Lease, SwapWaitError
from fronde.errors import BackendStartError, ModeUnavailableError
from fronde.modes import Mode

A, B, C = Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD
pytestmark = pytest.mark.anyio


@dataclass
class FakePool:
    """Backends that take ``start_s`` to start; modes in ``broken`` never start."""

    start_s: float = 0.02
    stop_s: float = 0.005
    broken: set[Mode] = field(default_factory=set[Mode])
    up: set[Mode] = field(default_factory=set[Mode])
    events: list[tuple[str, Mode]] = field(default_factory=list[tuple[str, Mode]])
    most_up: int = 0
    backends: dict[Mode, object] = field(default_factory=lambda: dict.fromkeys(Mode, object()))

    def is_ready(self, mode: Mode) -> bool:
        return mode in self.up

    async def start_mode(self, mode: Mode) -> None:
        await asyncio.sleep(self.start_s)
        if mode in self.broken:
            self.events.append(("start-failed", mode))
            raise BackendStartError(f"{mode} cannot start")
        self.up.add(mode)
        self.most_up = max(self.most_up, len(self.up))
        self.events.append(("start", mode))

    async def stop_mode(self, mode: Mode) -> None:
        await asyncio.sleep(self.stop_s)
        self.up.discard(mode)
        self.events.append(("stop", mode))


@dataclass
class Outcome:
    """What one request got: its lease (or the error) and when."""

    asked: Mode
    arrived: float
    lease: Lease | None = None
    error: Exception | None = None
    granted: float | None = None


async def run_workload(
    sched: SwapScheduler,
    arrivals: Sequence[tuple[float, Mode, float]],
    gate: asyncio.Semaphore | None = None,
) -> list[Outcome]:
    """Send requests (delay before it, mode, service seconds) through ``sched``.

    Each granted request holds its lease for its service time, behind ``gate``
    (one decode at a time, as Fronde's decode gate on a CPU).
    """
    gate = gate or asyncio.Semaphore(1)
    outcomes: list[Outcome] = []

    async def one(mode: Mode, service_s: float) -> None:
        out = Outcome(mode, time.monotonic())
        outcomes.append(out)
        try:
            out.lease = await sched.acquire(mode)
        except SwapWaitError as exc:
            out.error = exc
            return
        out.granted = time.monotonic()
        try:
            async with gate:
                await asyncio.sleep(service_s)
        finally:
            sched.release(out.lease)

    tasks: list[asyncio.Task[None]] = []
    for delay, mode, service_s in arrivals:
        if delay:  # requests with no delay arrive together, in order, before any grant
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(mode, service_s)))
    await asyncio.gather(*tasks)
    return outcomes


def scheduler(pool: FakePool, modes: Sequence[Mode] = (A, B), **kw: Any) -> SwapScheduler:
    kw = {"max_resident": 1, "max_epoch_s": 10.0, "max_wait_s": 10.0, **kw}
    return SwapScheduler(pool, modes, **kw)


INTERLEAVED = [(0.0, m, 0.03) for m in (B, A, B, A, B, A)]
"""Six requests arriving together, modes alternating; A (baseline) starts resident."""


@pytest.mark.parametrize(("policy", "swaps"), [("epoch", 1), ("fifo", 6)])
async def test_swap_count_for_a_known_arrival_sequence(
    policy: Literal["epoch", "fifo"], swaps: int
) -> None:
    pool = FakePool()
    sched = scheduler(pool, policy=policy)
    await sched.start()
    outcomes = await run_workload(sched, INTERLEAVED)
    await sched.stop()
    assert sched.swaps == swaps
    assert all(o.lease is not None and o.lease.mode is o.asked for o in outcomes)
    served = [o.asked for o in sorted(outcomes, key=lambda o: o.granted or 0.0)]
    if policy == "epoch":
        # The resident mode's three requests first, one swap, then the other three.
        assert served == [A, A, A, B, B, B]
        assert pool.events == [("start", A), ("stop", A), ("start", B)]
    else:
        assert served == [B, A, B, A, B, A]
    assert pool.most_up == 1


async def test_an_epoch_ends_after_max_epoch_s_even_when_its_queue_never_empties() -> None:
    pool = FakePool()
    sched = scheduler(pool, max_epoch_s=0.15)
    await sched.start()
    # A steady stream of A (every 20 ms, 15 ms each) and one B early on.
    arrivals = [(0.02, A, 0.015) for _ in range(30)]
    arrivals.insert(2, (0.0, B, 0.015))
    outcomes = await run_workload(sched, arrivals)
    await sched.stop()
    b = next(o for o in outcomes if o.asked is B)
    assert b.lease is not None and b.lease.mode is B  # not starved
    assert b.lease.waited_s < 0.15 + 0.1  # an epoch, a swap and loop latency
    assert sched.swaps >= 2  # to B, and back to A for the rest


async def test_past_max_wait_a_request_falls_back_or_gets_a_503() -> None:
    for fallback in (True, False):
        pool = FakePool(start_s=0.5)  # a slow swap-in: B cannot be up within the bound
        sched = scheduler(pool, modes=(A, B, C), max_resident=1, max_wait_s=0.1)
        sched.fallback = fallback
        await sched.start()
        # A is resident and kept busy, so B's first swap is still running at 0.1 s.
        outcomes = await run_workload(sched, [(0.0, A, 0.05), (0.0, B, 0.01)])
        await sched.stop()
        b = next(o for o in outcomes if o.asked is B)
        assert b.arrived + 0.1 <= (b.granted or time.monotonic()) + 0.05
        if fallback:
            # Nothing is resident while B loads (one slot), so even with fallback
            # allowed the only honest answer at the bound is a 503.
            assert isinstance(b.error, SwapWaitError) or (b.lease and b.lease.fallback)
        else:
            assert isinstance(b.error, SwapWaitError)
            assert b.error.status_code == 503


async def test_fallback_serves_from_the_resident_mode_when_one_is_up() -> None:
    pool = FakePool()
    sched = scheduler(pool, max_resident=1, max_wait_s=0.1, max_epoch_s=10.0)
    await sched.start()
    # A stays busy (a long request) and its epoch is long: B waits, then falls back.
    outcomes = await run_workload(sched, [(0.0, A, 0.4), (0.01, A, 0.01), (0.0, B, 0.01)])
    await sched.stop()
    b = next(o for o in outcomes if o.asked is B)
    assert b.lease is not None and b.lease.fallback and b.lease.mode is A
    assert 0.09 <= b.lease.waited_s < 0.25
    assert sched.fallbacks == 1


@pytest.mark.parametrize("fallback", [True, False])
async def test_a_failed_swap_loses_no_request_and_restores_service(fallback: bool) -> None:
    pool = FakePool(broken={B})
    sched = scheduler(pool, max_wait_s=5.0)
    sched.fallback = fallback
    await sched.start()
    arrivals = [(0.0, B, 0.01), (0.0, B, 0.01), (0.01, A, 0.01), (0.0, B, 0.01)]
    outcomes = await run_workload(sched, arrivals)
    assert len(outcomes) == 4
    assert all((o.lease is None) != (o.error is None) for o in outcomes)  # exactly one answer
    assert ("start-failed", B) in pool.events
    assert pool.up == {A}  # A was started again after B failed
    for o in outcomes:
        if o.asked is A:
            assert o.lease is not None and o.lease.mode is A
        elif fallback:
            assert o.lease is not None and o.lease.mode is A and o.lease.fallback
        else:
            assert isinstance(o.error, SwapWaitError)
    assert B not in sched.available()  # in back-off: the router stops sending there
    await sched.stop()


async def test_an_unknown_mode_is_refused_at_once() -> None:
    sched = scheduler(FakePool(), modes=(A,))
    await sched.start()
    with pytest.raises(ModeUnavailableError):
        await sched.acquire(C)
    await sched.stop()


async def test_a_waiter_that_leaves_is_dropped_from_its_queue() -> None:
    pool = FakePool(start_s=0.3)
    sched = scheduler(pool)
    await sched.start()
    hold = await sched.acquire(A)  # A busy: B must wait for the swap
    waiting = asyncio.create_task(sched.acquire(B))
    await asyncio.sleep(0.02)
    assert sched.snapshot()["queues"]["ngram-simple"] == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert sched.snapshot()["queues"]["ngram-simple"] == 0
    sched.release(hold)
    sched.release(hold)  # idempotent
    assert sched.active[A] == 0
    await sched.stop()


ARRIVALS = st.lists(
    st.tuples(
        st.floats(0.0, 0.03),
        st.sampled_from([A, B, C]),
        st.floats(0.001, 0.02),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=30, deadline=None)
@given(
    arrivals=ARRIVALS,
    max_resident=st.integers(1, 2),
    policy=st.sampled_from(["epoch", "fifo"]),
    fallback=st.booleans(),
    max_epoch_s=st.floats(0.0, 0.1),
)
def test_no_request_waits_past_the_bound_or_is_lost(
    arrivals: list[tuple[float, Mode, float]],
    max_resident: int,
    policy: Literal["epoch", "fifo"],
    fallback: bool,
    max_epoch_s: float,
) -> None:
    max_wait_s = 0.25

    async def main() -> tuple[list[Outcome], FakePool]:
        pool = FakePool(start_s=0.015)
        sched = SwapScheduler(
            pool,
            (A, B, C),
            max_resident=max_resident,
            max_epoch_s=max_epoch_s,
            max_wait_s=max_wait_s,
            fallback=fallback,
            policy=policy,
        )
        await sched.start()
        outcomes = await run_workload(sched, arrivals)
        await sched.stop()
        return outcomes, pool

    outcomes, pool = asyncio.run(main())
    assert len(outcomes) == len(arrivals)
    slack = 0.15  # the loop's wake-up and one service slot, on a loaded 2-core machine
    for o in outcomes:
        assert (o.lease is None) != (o.error is None)  # exactly one answer
        if o.lease is not None:
            assert o.lease.waited_s <= max_wait_s + slack
            assert o.lease.mode is o.asked or (fallback and o.lease.fallback)
    assert pool.most_up <= max_resident
