"""``scripts/gpu/hop_probe.py``'s race: each request to two servers, the first answer kept.

On the H200 (gemma, c = 1, 2026-12-04) the race read 0.50× the better server alone; these
tests pin what the probe does, over fake servers, so that such a reading is the servers'
and not the probe's: the first answer to end is kept whole, the other stream is closed,
a failed server loses the race, and two failures are both named.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import ModuleType

import httpx
import pytest

from fronde.bench.arms import Target
from fronde.errors import FrondeError
from tests.scripts import load_script


def _probe() -> ModuleType:
    return load_script("gpu/hop_probe.py")


class _Stream(httpx.AsyncByteStream):
    """A streamed completion: ``n`` text events ``gap_s`` apart, then ``[DONE]``.

    On close it records its text and how many events it had sent by then.
    """

    def __init__(self, text: str, n: int, gap_s: float, closed: list[tuple[str, int]]) -> None:
        self.text, self.n, self.gap_s, self.closed = text, n, gap_s, closed
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.n):
            await asyncio.sleep(self.gap_s)
            self.sent += 1
            event = {"choices": [{"text": self.text, "index": 0}]}
            yield f"data: {json.dumps(event)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def aclose(self) -> None:
        self.closed.append((self.text, self.sent))


def _servers(gaps: dict[str, float | None], closed: list[tuple[str, int]]) -> httpx.AsyncClient:
    """Fake servers by host: each streams its host's name; None answers 500."""

    async def handle(request: httpx.Request) -> httpx.Response:
        gap = gaps[request.url.host]
        if gap is None:
            return httpx.Response(500, text="boom")
        stream = _Stream(request.url.host, 5, gap, closed)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


def _targets(*hosts: str) -> list[Target]:
    return [Target(f"http://{h}", {}) for h in hosts]


BODY = {"prompt": "x", "max_tokens": 5, "stream": True}


@pytest.mark.anyio
async def test_the_first_answer_to_end_is_kept_whole_and_the_other_stream_closed() -> None:
    probe = _probe()
    closed: list[tuple[str, int]] = []
    async with _servers({"slow": 0.05, "fast": 0.001}, closed) as http:
        sample, won = await probe.race(http, _targets("slow", "fast"), "completion", BODY)
        # The loser's stream is closed at once, before its answer ended.
        assert [(text, sent < 5) for text, sent in closed if text == "slow"] == [("slow", True)]
    assert won == 1 and sample.text == "fast" * 5


@pytest.mark.anyio
async def test_a_server_that_fails_loses_the_race() -> None:
    probe = _probe()
    async with _servers({"broken": None, "ok": 0.01}, []) as http:
        sample, won = await probe.race(http, _targets("broken", "ok"), "completion", BODY)
    assert won == 1 and sample.text == "ok" * 5


@pytest.mark.anyio
async def test_when_every_server_fails_each_failure_is_named() -> None:
    probe = _probe()
    async with _servers({"a": None, "b": None}, []) as http:
        with pytest.raises(FrondeError, match=r"every server failed: .*a.*; .*b"):
            await probe.race(http, _targets("a", "b"), "completion", BODY)
