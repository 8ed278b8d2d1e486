"""Slot pinning: each generation next to the busy llama-server slots, released after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool, PoolPlan
from fronde.backends.process import LaunchSpec
from fronde.backends.slots import SlotPins
from fronde.errors import BackendHTTPError
from fronde.modes import Mode

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"


def pins_of(slots: int) -> SlotPins:
    pins = SlotPins()
    pins.count_with(lambda url: slots if url == "http://b" else 0)
    return pins


def test_the_lowest_free_id_is_taken_and_a_gap_is_filled_first() -> None:
    pins = pins_of(4)
    assert [pins.take("http://b", CHAT, {}) for _ in range(3)] == [0, 1, 2]
    pins.give("http://b", 1)
    assert pins.take("http://b", "/completion", {}) == 1
    assert pins.take("http://b", "/v1/messages", {}) == 3
    assert pins.take("http://b", CHAT, {}) is None  # all four held: the server queues it
    assert pins.held("http://b") == {0, 1, 2, 3}


def test_a_slot_next_to_the_held_ones_is_taken_before_a_lower_one() -> None:
    pins = pins_of(8)
    for _ in range(3):
        pins.take("http://b", CHAT, {})
    pins.give("http://b", 0)
    pins.give("http://b", 1)
    # held {2}: 1 keeps one run where 0 would make two
    assert pins.take("http://b", CHAT, {}) == 1
    # held {1, 2}: 0 and 3 both extend the run; the lower one
    assert pins.take("http://b", CHAT, {}) == 0


def test_nothing_is_pinned_where_it_should_not_be() -> None:
    pins = pins_of(4)
    assert pins.take("http://b", "/tokenize", {}) is None  # takes no slot
    assert pins.take("http://b", CHAT, {"id_slot": 3}) is None  # the client named one
    assert pins.take("http://remote", CHAT, {}) is None  # not a backend Fronde started
    assert pins_of(1).take("http://b", CHAT, {}) is None  # one slot: nothing to keep together
    assert SlotPins().take("http://b", CHAT, {}) is None  # off until count_with
    assert pins.held("http://b") == frozenset()


def recording_client(status: int = 200) -> tuple[BackendClient, list[dict[str, Any]]]:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if status >= 400:
            return httpx.Response(status, json={"error": {"message": "no", "code": status}})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1]})
        return httpx.Response(
            200, text="data: {}\n\n", headers={"content-type": "text/event-stream"}
        )

    c = BackendClient(httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    c.pins = pins_of(16)
    return c, bodies


async def test_the_client_sends_id_slot_and_frees_it_when_the_stream_ends() -> None:
    c, bodies = recording_client()
    async with c.stream("http://b", CHAT, {"stream": True}) as first:
        assert c.pins.held("http://b") == {0}
        async with c.stream("http://b", CHAT, {"stream": True}):
            assert c.pins.held("http://b") == {0, 1}
        [_ async for _ in first.lines()]
        assert c.pins.held("http://b") == {0}
    assert c.pins.held("http://b") == frozenset()
    assert [b["id_slot"] for b in bodies] == [0, 1]
    await c.post_json("http://b", "/tokenize", {"content": "x"})
    assert "id_slot" not in bodies[-1]


async def test_a_failed_request_frees_its_slot() -> None:
    c, bodies = recording_client(status=400)
    with pytest.raises(BackendHTTPError):
        async with c.stream("http://b", CHAT, {}):
            pass
    with pytest.raises(BackendHTTPError):
        await c.post_json("http://b", "/completion", {})
    assert c.pins.held("http://b") == frozenset()
    assert [b["id_slot"] for b in bodies] == [0, 0]


def test_the_pool_counts_the_slots_of_its_own_servers_only(tmp_path: Path) -> None:
    args = ["-m", "x.gguf", "-np", "16", "--alias", "m", "-np", "8"]
    spec = LaunchSpec(Mode.BASELINE, tmp_path / "llama-server", args, tmp_path / "b.log")
    pool = BackendPool(PoolPlan({Mode.BASELINE: spec}, {}))
    proc = pool.backends[Mode.BASELINE]
    assert pool.local_slots("http://127.0.0.1:1") == 0  # not started: no URL yet
    proc.port = 41234  # pyright: ignore[reportAttributeAccessIssue]
    assert pool.local_slots("http://127.0.0.1:41234") == 8  # the last -np, as llama-server
    assert pool.local_slots("http://127.0.0.1:9") == 0
