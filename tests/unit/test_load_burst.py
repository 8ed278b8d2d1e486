"""Clients that start at once: the measured load rule places each for the load they make.

Found on the H200 (gemma, ``results/load-gpu-h200-cpu-gemma-270m-20261203-bs2``, c = 32):
the requests of a burst were each placed for the load planned before them; up to a load
of about 21, where the curves say two servers pay, every other one went to ngram-mod's
server, and stayed there once the load was 32, where baseline's alone serves far more.
The curves here are made up to the same shape.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest

from fronde.backends.client import BackendClient, UpstreamStream
from fronde.backends.pool import BackendPool
from fronde.backends.props import PropsCache
from fronde.client_request import ChatRequest
from fronde.config import load_settings
from fronde.evidence.calibration import LoadCurves
from fronde.modes import Mode
from fronde.request import Dispatcher
from fronde.request.reply import Streamed
from fronde.router.classify import RequestClass
from fronde.router.engine import Router
from fronde.router.plan import Plan, Route, RouterPolicy, Situation
from fronde.router.policy import plan_route

# Speculation serves more at a low load, plain decoding from load 3 on (a GPU's shape).
CURVES = LoadCurves(
    {
        Mode.BASELINE: ((1, 600.0), (2, 1150.0), (4, 2200.0), (8, 4000.0), (16, 6000.0)),
        Mode.NGRAM_MOD: ((1, 700.0), (2, 1200.0), (4, 1900.0), (8, 2600.0), (16, 3000.0)),
        Mode.CASCADE: ((1, 690.0), (2, 1190.0), (4, 1850.0), (8, 2500.0), (16, 2900.0)),
    },
    "test",
)
POLICY = RouterPolicy(
    load_rule="measured", floor=Mode.NGRAM_MOD, probe="never", load_placement="best"
)
READY = [Mode.BASELINE, Mode.NGRAM_MOD, Mode.CASCADE]


def test_requests_arriving_with_this_one_count_in_the_load() -> None:
    def at(in_flight: dict[Mode, int], arriving: int) -> Plan:
        return plan_route(
            RequestClass.GENERAL,
            Situation(
                ready=READY,
                speed=lambda m, c: None,
                policy=POLICY,
                in_flight=in_flight,
                curves=CURVES,
                slots=32,
                arriving=arriving,
            ),
        )

    # Alone, nothing arriving: the ordinary rules (the floor).
    assert at({}, 0) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    # Nothing in flight yet, seven more arriving: load 8, where baseline serves 4000
    # against ngram-mod's 2600.
    assert at({}, 7) == Plan(Route.LOAD, Mode.BASELINE)
    # One in flight on ngram-mod and none arriving: load 2, all within 5 %: it joins.
    assert at({Mode.NGRAM_MOD: 1}, 0) == Plan(Route.FALLBACK, Mode.NGRAM_MOD)
    assert at({Mode.NGRAM_MOD: 1}, 6) == Plan(Route.LOAD, Mode.BASELINE)


@dataclass
class _Backend:
    url: str


class _Pool:
    """Every mode ready, each at its own URL."""

    topology = "per-mode"

    def __init__(self) -> None:
        self.props = PropsCache()
        self.backends = {m: _Backend(f"http://{m}") for m in READY}

    def fields(self, mode: Mode) -> dict[str, Any]:
        return {}  # a server per mode: no request fields

    def ready_modes(self) -> list[Mode]:
        return list(self.backends)

    def get(self, mode: Mode) -> _Backend:
        return self.backends[mode]


class _Holding(BackendClient):
    """A backend that takes every request and answers none until released."""

    def __init__(self) -> None:
        super().__init__(httpx.AsyncClient())
        self.release = asyncio.Event()
        self.opened = 0

    @asynccontextmanager
    async def stream(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, base_url: str, path: str, body: dict[str, Any]
    ) -> AsyncGenerator[UpstreamStream]:
        self.opened += 1
        await self.release.wait()
        raise httpx.ConnectError("released")
        yield  # pragma: no cover - never reached


@pytest.mark.anyio
async def test_clients_that_start_at_once_are_placed_for_the_load_they_make() -> None:
    client = _Holding()
    router = Router(POLICY, slots=32, max_parallel_decodes=128, load_curves=CURVES)
    pool = cast("BackendPool", _Pool())
    dispatcher = Dispatcher(load_settings(), pool, client, router)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    tasks = [
        asyncio.create_task(dispatcher.answer("chat", ChatRequest.model_validate(body), None))
        for _ in range(8)
    ]
    for _ in range(100):
        await asyncio.sleep(0.01)
        if client.opened == 8:
            break
    assert client.opened == 8  # all eight are in flight
    modes = [d.plan.mode for d in router.recent]
    # Planned one by one with only the earlier ones counted, the first two went to
    # ngram-mod (alone, then load 2 where every curve is within 5 %); counted with
    # the requests arriving with them, all eight see load 8: baseline.
    assert modes == [Mode.BASELINE] * 8
    assert router.in_flight[Mode.BASELINE] == 8 and router.arriving == 0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    client.release.set()
    assert router.arriving == 0 and sum(router.in_flight.values()) == 0


@pytest.mark.anyio
async def test_a_request_waiting_for_a_slot_still_counts_in_the_load() -> None:
    client = _Holding()
    # One generation at a time (the decode gate): the second request is planned, then
    # waits for the slot without being in flight on any backend.
    router = Router(POLICY, slots=32, max_parallel_decodes=1, load_curves=CURVES)
    dispatcher = Dispatcher(load_settings(), cast("BackendPool", _Pool()), client, router)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    first = asyncio.create_task(dispatcher.answer("chat", ChatRequest.model_validate(body), None))
    second = asyncio.create_task(dispatcher.answer("chat", ChatRequest.model_validate(body), None))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if client.opened == 1 and len(router.recent) == 2:
            break
    assert sum(router.in_flight.values()) == 1  # the first decodes
    assert router.arriving == 1  # the second waits: counted, not lost between the two
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert router.arriving == 0
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    client.release.set()
    assert router.arriving == 0 and sum(router.in_flight.values()) == 0


async def _ramp(gather_ms: float, clients: int = 8, spacing_s: float = 0.002) -> list[Mode]:
    """Where ``clients`` streamed requests ``spacing_s`` apart go, with ``gather_ms``."""
    client = _Holding()
    router = Router(POLICY, slots=32, max_parallel_decodes=128, load_curves=CURVES)
    settings = load_settings(router={"gather_ms": gather_ms, "gather_max_ms": 2000})
    dispatcher = Dispatcher(settings, cast("BackendPool", _Pool()), client, router)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    tasks: list[asyncio.Task[Any]] = []
    for _ in range(clients):
        tasks.append(
            asyncio.create_task(dispatcher.answer("chat", ChatRequest.model_validate(body), None))
        )
        await asyncio.sleep(spacing_s)
    for _ in range(300):
        await asyncio.sleep(0.01)
        if client.opened == clients:
            break
    assert client.opened == clients
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    client.release.set()
    assert router.arriving == 0 and sum(router.in_flight.values()) == 0
    return [d.plan.mode for d in router.recent]  # in the order they were planned


@pytest.mark.anyio
async def test_clients_starting_a_few_ms_apart_are_placed_for_the_load_they_make() -> None:
    # A ramp, 2 ms apart: each request is placed before the next arrives, so one turn
    # of the event loop counts none of those to come; the first ones join ngram-mod.
    unsure = await _ramp(gather_ms=0)
    assert unsure.count(Mode.NGRAM_MOD) >= 2
    # Waiting for the burst to end (300 ms without an arrival here, generous for a
    # busy machine): the first, alone, cannot know; the other seven see load 8.
    gathered = await _ramp(gather_ms=300)
    assert gathered[1:] == [Mode.BASELINE] * 7


async def _reads() -> AsyncGenerator[bytes]:
    """A llama-server's streamed chat answer, one read an event: two, then ``[DONE]``."""
    chunk = '{"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": null}]}'
    for event in (f"data: {chunk}", f"data: {chunk}", "data: [DONE]"):
        yield f"{event}\n\n".encode()
        await asyncio.sleep(0.01)


def _sse(request: httpx.Request) -> httpx.Response:
    """The streamed answer of :func:`_reads`."""
    return httpx.Response(200, content=_reads(), headers={"content-type": "text/event-stream"})


@pytest.mark.anyio
async def test_a_stream_is_out_of_the_load_when_its_client_reads_the_end() -> None:
    # A closed-loop client sends its next request as soon as it reads [DONE]: its
    # last one must be out of the load by then, or a full server looks busier
    # than it is.
    client = BackendClient(httpx.AsyncClient(transport=httpx.MockTransport(_sse)))
    router = Router(POLICY, slots=32, max_parallel_decodes=128, load_curves=CURVES)
    dispatcher = Dispatcher(load_settings(), cast("BackendPool", _Pool()), client, router)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    answer = await dispatcher.answer("chat", ChatRequest.model_validate(body), Mode.BASELINE.value)
    assert isinstance(answer, Streamed)
    in_flight_at: list[int] = []
    pieces: list[bytes] = []
    async for piece in answer.events:
        pieces.append(piece)
        in_flight_at.append(sum(router.in_flight.values()))
        if b"[DONE]" in piece:
            assert sum(router.in_flight.values()) == 0
            assert router.recent[-1].status == "done"
    assert any(b"[DONE]" in piece for piece in pieces)
    assert in_flight_at[0] == 1  # counted while it streams
    assert sum(router.in_flight.values()) == 0 and router.arriving == 0


@pytest.mark.anyio
async def test_the_wait_for_a_burst_is_told_apart_from_the_rest_of_the_overhead() -> None:
    # On the H200 (gemma, c = 32, results/load-gpu-h200-cpu-gemma-270m-20261204-pin32)
    # the first burst's requests read up to 148 ms of x-fronde-overhead-ms; the
    # x-fronde-gather-ms header says how much of it was the wait for the burst to end.
    client = BackendClient(httpx.AsyncClient(transport=httpx.MockTransport(_sse)))
    router = Router(POLICY, slots=32, max_parallel_decodes=128, load_curves=CURVES)
    settings = load_settings(router={"gather_ms": 100, "gather_max_ms": 2000})
    dispatcher = Dispatcher(settings, cast("BackendPool", _Pool()), client, router)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}

    async def answered(mode: str | None = None) -> dict[str, str]:
        answer = await dispatcher.answer("chat", ChatRequest.model_validate(body), mode)
        assert isinstance(answer, Streamed)
        async for _ in answer.events:
            pass
        return answer.headers

    first, second = await asyncio.gather(answered(), answered())
    # The first came alone and was placed at once; the second came with it and
    # waited until nothing had arrived for 100 ms.
    assert float(first["x-fronde-gather-ms"]) < 50
    assert 99 <= float(second["x-fronde-gather-ms"]) <= float(second["x-fronde-overhead-ms"])
    # A forced mode is never held for a burst: no such header.
    assert "x-fronde-gather-ms" not in await answered(Mode.BASELINE.value)
