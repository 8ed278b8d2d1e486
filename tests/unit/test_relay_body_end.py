"""After ``[DONE]`` the relay reads the upstream body to its end, so that its connection
goes back to the pool, and waits for it no longer than ``BODY_END_WAIT_S``."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from fronde.backends.client import UpstreamStream
from fronde.request.collect import collect
from fronde.request.relay import BODY_END_WAIT_S, relay_sse

DONE = b"data: [DONE]\n\n"


class _Body(httpx.AsyncByteStream):
    """A streamed answer: one event and ``[DONE]`` in one read, then its end.

    ``ended`` turns true once a reader asked for more after the last read (where the
    chunked body's empty last chunk comes); ``hang_s`` holds the end back that long.
    """

    def __init__(self, hang_s: float = 0.0) -> None:
        self.hang_s = hang_s
        self.ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunk = {"choices": [{"index": 0, "delta": {"content": "red"}}], "id": "c"}
        yield f"data: {json.dumps(chunk)}\n\n".encode() + DONE
        await asyncio.sleep(self.hang_s)
        self.ended = True


def test_a_stream_is_read_to_its_end_after_done_is_handed_on() -> None:
    """The piece with [DONE] reaches the consumer first; the body's end is read after it."""
    body = _Body()
    seen: list[tuple[bytes, bool]] = []

    async def run() -> None:
        upstream = UpstreamStream(httpx.Response(200, stream=body), "http://x")
        async for piece in relay_sse(upstream, "baseline"):
            seen.append((piece, body.ended))

    asyncio.run(run())
    assert [piece.endswith(DONE) for piece, _ in seen] == [True]
    assert seen[0][1] is False  # the client had [DONE] before the relay read on
    assert body.ended


def test_a_body_that_does_not_end_is_left_after_the_wait() -> None:
    """A backend that sends [DONE] and keeps the body open holds the relay back briefly."""
    body = _Body(hang_s=30.0)

    async def run() -> list[bytes]:
        upstream = UpstreamStream(httpx.Response(200, stream=body), "http://x")
        return [piece async for piece in relay_sse(upstream, "baseline")]

    t0 = time.monotonic()
    pieces = asyncio.run(run())
    assert time.monotonic() - t0 < BODY_END_WAIT_S + 1.0
    assert pieces[-1].endswith(DONE)
    assert not body.ended


def test_a_whole_answer_is_collected_after_the_body_ended() -> None:
    """A non-streamed request (asked as a stream) reads its body to the end too."""
    body = _Body()

    async def run() -> dict[str, Any]:
        upstream = UpstreamStream(httpx.Response(200, stream=body), "http://x")
        return await collect(relay_sse(upstream, "baseline"), "chat")

    answer = asyncio.run(run())
    assert body.ended
    assert answer["choices"][0]["message"] == {"role": "assistant", "content": "red"}
