"""A whole answer folded from llama-server's stream keeps what its own whole answer has."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fronde.request.collect import collect

TIMINGS = {"prompt_n": 31, "prompt_ms": 149.3, "predicted_n": 3, "predicted_ms": 26.2}
# The tail of a b11434 stream with include_usage (seen with curl): the finish chunk, then
# the usage chunk, which alone carries the timings.
EVENTS: list[dict[str, Any]] = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}], "id": "c"},
    {"choices": [{"index": 0, "delta": {"content": " there"}}], "id": "c"},
    {"choices": [{"finish_reason": "length", "index": 0, "delta": {}}], "id": "c"},
    {"choices": [], "id": "c", "usage": {"completion_tokens": 3}, "timings": TIMINGS},
]


async def lines() -> AsyncIterator[bytes]:
    for event in EVENTS:
        yield f"data: {json.dumps(event)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def test_the_usage_chunks_timings_reach_the_whole_answer() -> None:
    whole = asyncio.run(collect(lines(), "chat"))
    assert whole["choices"][0]["message"]["content"] == "Hi there"
    assert whole["choices"][0]["finish_reason"] == "length"
    assert whole["usage"] == {"completion_tokens": 3}
    assert whole["timings"] == TIMINGS
