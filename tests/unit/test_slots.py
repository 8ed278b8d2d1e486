"""Slot pinning: each generation next to the busy llama-server slots, released after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool, PoolPlan
from fronde.backends.process import LaunchSpec
from fronde.backends.slots import SlotPins, next_slot
from fronde.errors import BackendHTTPError
from fronde.json_types import JSON, JSONObject
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


def test_a_kept_slot_is_held_until_every_keep_is_let_go() -> None:
    """A probed answer keeps its probe's slot between segments (fronde.request.splice)."""
    pins = pins_of(4)
    pins.keep("http://b", 0)
    pins.keep("http://b", 0)  # two answers' keeps (a counter, not a set)
    pin = pins.begin("http://b", CHAT, {})  # not loose: the server is not idle
    assert pin is not None and pin.slot == 1
    pins.end("http://b", pin)
    assert pins.take("http://b", CHAT, {}) == 1  # beside the kept one, never on it
    pins.give("http://b", 1)
    pins.unkeep("http://b", 0)
    assert pins.held("http://b") == {0}
    pins.unkeep("http://b", 0)
    pins.unkeep("http://b", 0)  # one too many: a no-op
    assert pins.held("http://b") == frozenset()
    pin = pins.begin("http://b", CHAT, {})
    assert pin is not None and pin.loose  # idle again: the server places it


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


def test_a_gap_inside_the_held_ids_is_filled_before_a_run_is_extended_outward() -> None:
    """The walk-down of the 2026-12-07 H100 run: 21 and 22 free between two runs."""
    held = frozenset({18, 19, 20, 23, 24, 25})
    assert next_slot(held, 32) == 21  # 17 extends a run as well, but leaves the gap open
    assert next_slot(held | {21}, 32) == 22  # joins the two runs
    assert next_slot(frozenset(range(18, 26)), 32) == 17  # no gap: the lower edge
    assert next_slot(frozenset(), 32) == 0
    assert next_slot(frozenset(range(4)), 4) is None


def test_nothing_is_pinned_where_it_should_not_be() -> None:
    pins = pins_of(4)
    assert pins.take("http://b", "/tokenize", {}) is None  # takes no slot
    assert pins.take("http://b", CHAT, {"id_slot": 3}) is None  # the client named one
    assert pins.take("http://remote", CHAT, {}) is None  # not a backend Fronde started
    assert pins_of(1).take("http://b", CHAT, {}) is None  # one slot: nothing to keep together
    assert SlotPins().take("http://b", CHAT, {}) is None  # off until count_with
    assert pins.held("http://b") == frozenset()


def recording_client(
    status: int = 200, busy: tuple[int, ...] = (), slots_status: int = 200
) -> tuple[BackendClient, list[dict[str, Any]]]:
    """A client over a fake backend of 16 slots; the bodies it got, ``/slots`` GETs as ``{}``.

    ``/slots`` shows the ids in ``busy`` processing (or answers ``slots_status``).
    """
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slots":
            bodies.append({"GET": "/slots"})
            if slots_status >= 400:
                return httpx.Response(slots_status, json={"error": {"message": "off"}})
            return httpx.Response(
                200, json=[{"id": i, "is_processing": i in busy} for i in range(16)]
            )
        bodies.append(json.loads(request.content))
        if status >= 400:
            return httpx.Response(status, json={"error": {"message": "no", "code": status}})
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"tokens": [1]})
        if not bodies[-1].get("stream"):
            return httpx.Response(200, json={"content": "whole"})
        return httpx.Response(
            200, text="data: {}\n\n", headers={"content-type": "text/event-stream"}
        )

    c = BackendClient(httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    c.pins = pins_of(16)
    return c, bodies


async def test_one_request_at_a_time_is_placed_by_the_server_itself() -> None:
    # c = 1: every request finds the server idle and goes without id_slot, as to the
    # server alone (pinned to slot 0, 18 of 66 SmolLM2 answers differed on the H200).
    c, bodies = recording_client()
    for _ in range(3):
        async with c.stream("http://b", CHAT, {"stream": True}) as up:
            [_ async for _ in up.lines()]
    assert bodies == [{"stream": True}] * 3  # no id_slot, no /slots lookup
    assert c.pins.held("http://b") == frozenset()


async def test_a_second_request_is_pinned_next_to_the_slot_the_server_chose() -> None:
    c, bodies = recording_client(busy=(7,))  # the server put the first request on 7
    async with c.stream("http://b", CHAT, {"stream": True}) as first:
        assert "id_slot" not in bodies[0]
        async with c.stream("http://b", CHAT, {"stream": True}):
            assert bodies[1] == {"GET": "/slots"}  # learned once, before pinning
            assert bodies[2]["id_slot"] == 6  # beside 7 (6 and 8 extend it: the lower)
            assert c.pins.held("http://b") == {6, 7}
            async with c.stream("http://b", CHAT, {"stream": True}):
                assert bodies[3]["id_slot"] == 5  # no second lookup
        [_ async for _ in first.lines()]
        assert c.pins.held("http://b") == {7}  # the first's, until it ends
    assert c.pins.held("http://b") == frozenset()
    async with c.stream("http://b", CHAT, {"stream": True}):
        pass
    assert "id_slot" not in bodies[-1]  # idle again: the server places it
    await c.post_json("http://b", "/tokenize", {"content": "x"})
    assert "id_slot" not in bodies[-1]


async def test_requests_arriving_together_share_one_lookup() -> None:
    c, bodies = recording_client(busy=(15,))
    async with c.stream("http://b", CHAT, {"stream": True}):

        async def pinned() -> None:
            async with c.stream("http://b", CHAT, {"stream": True}):
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(pinned)
    assert bodies.count({"GET": "/slots"}) == 1
    assert sorted(b["id_slot"] for b in bodies if "id_slot" in b) == [12, 13, 14]


async def test_with_every_slot_held_a_request_waits_for_one_let_go_and_takes_it() -> None:
    # Sent without id_slot at once, it could take the slot a pinned request was on its
    # way to (SlotPins.FREE_WAIT_S); it waits for a slot Fronde lets go instead.
    c, bodies = recording_client(busy=(1,))
    c.pins = pins_of(2)
    order: list[str] = []

    async def third() -> None:
        async with c.stream("http://b", CHAT, {"stream": True}):
            order.append("third sent")

    async with c.stream("http://b", CHAT, {"stream": True}) as first:  # loose: on 1
        # The second, pinned beside the first, ends inside the task group: the third waits.
        async with (
            anyio.create_task_group() as tg,
            c.stream("http://b", CHAT, {"stream": True}),
        ):
            assert c.pins.full("http://b", CHAT, {})
            tg.start_soon(third)
            await anyio.sleep(0.05)
            assert order == []  # still waiting: both slots held
            order.append("second ends")
        assert order == ["second ends", "third sent"]
        [_ async for _ in first.lines()]
    sent = [b for b in bodies if b.get("stream")]
    assert "id_slot" not in sent[0]
    assert sent[1]["id_slot"] == sent[2]["id_slot"] == 0  # the slot let go, pinned again
    assert c.pins.held("http://b") == frozenset()


async def test_a_wait_for_a_free_slot_gives_up_after_its_time() -> None:
    pins = pins_of(2)
    assert pins.take("http://b", CHAT, {}) == 0
    assert pins.take("http://b", CHAT, {}) == 1
    assert pins.full("http://b", CHAT, {})
    assert not pins.full("http://b", "/tokenize", {})  # takes no slot
    assert not await pins.wait_free("http://b", most_s=0.01)
    pins.give("http://b", 0)
    assert not pins.full("http://b", CHAT, {})


async def test_a_failed_lookup_pins_as_before() -> None:
    c, bodies = recording_client(slots_status=501)  # llama-server started with --no-slots
    async with (
        c.stream("http://b", CHAT, {"stream": True}) as first,
        c.stream("http://b", CHAT, {"stream": True}) as second,
    ):
        assert bodies[2]["id_slot"] == 0
        assert second.settle_ms > 0
        assert (first.slot, second.slot) == (None, 0)  # x-fronde-slot: the id_slot sent
    assert c.pins.held("http://b") == frozenset()
    async with c.stream("http://b", CHAT, {"stream": True}) as third:
        assert bodies[3]["id_slot"] == 0  # that server is pinned from its first request on
        assert third.settle_ms == 0.0
    assert bodies.count({"GET": "/slots"}) == 1


async def test_a_loose_request_that_ends_during_the_lookup_leaves_the_next_one_loose() -> None:
    pins = pins_of(16)
    first = pins.begin("http://b", CHAT, {})
    assert first is not None and first.loose
    first.sent.set()
    looked: list[str] = []

    async def lookup() -> JSON:
        looked.append("lookup")
        pins.end("http://b", first)  # the answer ended while /slots was asked
        return [{"id": 9, "is_processing": False}]

    assert pins.unsettled("http://b", CHAT, {})
    await pins.settle("http://b", lookup)
    assert not pins.unsettled("http://b", CHAT, {})  # nothing loose now
    second = pins.begin("http://b", CHAT, {})
    assert second is not None and second.loose and second.lookup is None  # its own lookup
    assert pins.unsettled("http://b", CHAT, {}) and pins.held("http://b") == frozenset()
    pins.end("http://b", second)
    assert looked == ["lookup"]


async def test_a_whole_answer_to_an_idle_server_is_placed_by_the_server_itself() -> None:
    # Non-streamed pass-through (/v1/messages, /v1/responses, /infill, /completion),
    # probes and pass timing: pinned to slot 0 each time, they too would reuse another
    # cached prefix than the server alone gives them.
    c, bodies = recording_client()
    for _ in range(2):
        await c.post_json("http://b", "/v1/messages", {"max_tokens": 4})
    assert bodies == [{"max_tokens": 4}] * 2  # no id_slot, no /slots lookup
    assert c.pins.held("http://b") == frozenset()


async def test_a_stream_beside_a_whole_answer_waits_until_the_server_shows_its_slot() -> None:
    # A whole answer's headers come with its end: /slots is read until the slot shows.
    reads = [0]
    started = anyio.Event()
    finish = anyio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slots":
            reads[0] += 1  # placed by the server on 11 from the third read on
            return httpx.Response(
                200, json=[{"id": i, "is_processing": reads[0] >= 3 and i == 11} for i in range(16)]
            )
        body = json.loads(request.content)
        if body.get("stream"):
            assert body["id_slot"] == 10  # beside 11 (10 and 12 extend it: the lower)
            return httpx.Response(200, text="data: {}\n\n")
        return httpx.Response(200, json={"content": "whole"})

    async def slow(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/completion":
            started.set()
            await finish.wait()
        return handler(request)

    c = BackendClient(httpx.AsyncClient(transport=httpx.MockTransport(slow)))
    c.pins = pins_of(16)
    async with anyio.create_task_group() as tg:
        whole: JSONObject = {"n_predict": 4}
        tg.start_soon(c.post_json, "http://b", "/completion", whole)
        await started.wait()
        async with c.stream("http://b", CHAT, {"stream": True}) as up:
            assert reads[0] == 3 and up.settle_ms > 0
            assert c.pins.held("http://b") == {10, 11}
        finish.set()
    assert c.pins.held("http://b") == frozenset()


async def test_a_whole_answer_that_ends_unseen_leaves_the_next_request_loose() -> None:
    # A short whole answer may end before /slots shows it: nothing is held, and the
    # request waiting goes loose itself (the server is idle again).
    pins = pins_of(16)
    whole = pins.begin("http://b", "/completion", {}, early=False)
    assert whole is not None and whole.loose and not whole.early
    looked: list[str] = []

    async def lookup() -> JSON:
        looked.append("lookup")
        if len(looked) == 2:
            pins.end("http://b", whole)  # the answer ended between two reads
        return [{"id": 9, "is_processing": False}]

    while pins.unsettled("http://b", CHAT, {}):
        await pins.settle("http://b", lookup)
    assert looked == ["lookup", "lookup"] and pins.held("http://b") == frozenset()
    nxt = pins.begin("http://b", CHAT, {})
    assert nxt is not None and nxt.loose
    pins.end("http://b", nxt)


async def test_a_failed_request_frees_its_slot() -> None:
    c, bodies = recording_client(status=400)
    with pytest.raises(BackendHTTPError):
        async with c.stream("http://b", CHAT, {}):
            pass
    with pytest.raises(BackendHTTPError):
        await c.post_json("http://b", "/completion", {})
    assert c.pins.held("http://b") == frozenset()
    assert "id_slot" not in bodies[0]  # the server was idle: it placed the stream
    assert "id_slot" not in bodies[1]  # and the whole answer (post_json)


def test_the_pool_counts_the_slots_of_its_own_servers_only(tmp_path: Path) -> None:
    args = ["-m", "x.gguf", "-np", "16", "--alias", "m", "-np", "8"]
    spec = LaunchSpec(Mode.BASELINE, tmp_path / "llama-server", args, tmp_path / "b.log")
    pool = BackendPool(PoolPlan({Mode.BASELINE: spec}, {}))
    proc = pool.backends[Mode.BASELINE]
    assert pool.local_slots("http://127.0.0.1:1") == 0  # not started: no URL yet
    proc.port = 41234  # pyright: ignore[reportAttributeAccessIssue]
    assert pool.local_slots("http://127.0.0.1:41234") == 8  # the last -np, as llama-server
    assert pool.local_slots("http://127.0.0.1:9") == 0
