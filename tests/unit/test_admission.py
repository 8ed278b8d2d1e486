"""Admission: one request's hold on the decode gate, in-flight counts and its status."""

from __future__ import annotations

import asyncio
import time

import pytest

from fronde.modes import Mode
from fronde.request.admission import Admission, Arrival
from fronde.router.classify import RequestClass
from fronde.router.engine import Router

pytestmark = pytest.mark.anyio


async def test_the_decode_gate_admits_one_generation_at_a_time() -> None:
    router = Router(max_parallel_decodes=1)
    first, second = Admission(router), Admission(router)
    await first.take_slot()
    waiter = asyncio.ensure_future(second.take_slot())
    await asyncio.sleep(0.01)
    assert not waiter.done()  # the second generation waits in Fronde
    first.release()
    first.release()  # releasing twice gives back one slot only
    await asyncio.wait_for(waiter, 1.0)
    assert router.gate.locked()  # still exactly one holder
    second.release()
    assert not router.gate.locked()


async def test_an_admission_writes_its_decisions_status_and_counts() -> None:
    router = Router(max_parallel_decodes=1)
    decision = router.plan(RequestClass.GENERAL, "k", [Mode.BASELINE])
    adm = Admission(router, decision)
    released: list[str] = []
    adm.on_release(lambda: released.append("lease"))
    assert decision.status == "waiting"
    await adm.take_slot()
    assert decision.status == "running" and decision.queued_ms is not None
    with adm.generating(Mode.BASELINE):
        assert router.in_flight[Mode.BASELINE] == 1
    assert router.in_flight[Mode.BASELINE] == 0
    uncount = adm.count(Mode.NGRAM_MOD)
    uncount()
    uncount()  # idempotent
    assert router.in_flight[Mode.NGRAM_MOD] == 0
    adm.close("done")
    adm.close("error", "late")  # the first end counts
    assert (decision.status, decision.error, released) == ("done", None, ["lease"])
    assert not router.gate.locked()


async def test_a_lone_request_is_placed_at_once() -> None:
    router = Router()
    first = Arrival(router)
    t0 = time.monotonic()
    await first.gathered(quiet_s=0.5, most_s=5.0)
    assert time.monotonic() - t0 < 0.4  # nothing arrived within 0.5 s before it
    first.close()
    assert router.arriving == 0


async def test_a_request_of_a_burst_waits_until_the_burst_has_arrived() -> None:
    router = Router()
    Arrival(router)
    second = Arrival(router)  # within quiet_s of the first: a burst
    waiter = asyncio.ensure_future(second.gathered(quiet_s=0.1, most_s=5.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    third = Arrival(router)  # the burst goes on: the wait is from this one
    await asyncio.wait_for(waiter, 2.0)
    assert time.monotonic() - third.t0 >= 0.1
    assert router.arriving == 3  # all three counted when the second is placed


async def test_a_request_of_a_burst_waits_no_longer_than_most_s() -> None:
    router = Router()
    Arrival(router)
    second = Arrival(router)
    waiter = asyncio.ensure_future(second.gathered(quiet_s=0.1, most_s=0.3))
    for _ in range(100):  # a burst that never ends: one arrival every 20 ms for 2 s
        if waiter.done():
            break
        Arrival(router)
        await asyncio.sleep(0.02)
    assert waiter.done()
    assert 0.29 <= time.monotonic() - second.t0 < 1.5


async def test_a_client_coming_back_as_its_answer_ends_does_not_wait() -> None:
    # A closed loop: answers that end together bring their clients back together;
    # the load they join is counted already, so none of them waits for the others.
    router = Router()
    Arrival(router)
    router.last_end = time.monotonic()
    back = Arrival(router)
    t0 = time.monotonic()
    await back.gathered(quiet_s=0.5, most_s=5.0)
    assert time.monotonic() - t0 < 0.4
