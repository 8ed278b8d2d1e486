"""scripts/server_decode.py: one answer's decode rate and first token, and the summary."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.scripts import load_script

TIMINGS = {"prompt_ms": 12.5, "predicted_per_second": 80.0, "predicted_n": 3}


def _stream(first_text: bool = True, timings: dict[str, float] | None = None) -> bytes:
    """A llama-server chat stream: a role chunk, text chunks, the usage chunk, [DONE]."""
    events: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
    ]
    if first_text:
        events += [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("a", "b")]
    events.append({"choices": [], "usage": {"completion_tokens": 2}, "timings": timings or {}})
    lines = [f"data: {json.dumps(e, separators=(',', ':'))}\n\n" for e in events]
    return ("".join(lines) + "data: [DONE]\n\n").encode()


def _client(body: bytes, seen: list[httpx.Request]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_an_answer_is_its_servers_rate_and_its_first_token_less_the_prefill() -> None:
    script = load_script("server_decode.py")
    seen: list[httpx.Request] = []
    with _client(_stream(timings=TIMINGS), seen) as client:
        got = script.answer(client, "http://server", 7, {"x-fronde-mode": "baseline"})
    assert got is not None
    assert got.rate == 80.0
    # The mock answers at once: the first text came well under the 12.5-ms prefill.
    assert -12.5 <= got.outside_ms < 0
    body = json.loads(seen[0].content)
    assert body["stream"] is True and body["max_tokens"] == 64 and body["temperature"] == 0
    assert seen[0].headers["x-fronde-mode"] == "baseline"
    assert seen[0].url.path == "/v1/chat/completions"


def test_an_answer_without_text_or_timings_is_left_out() -> None:
    script = load_script("server_decode.py")
    with _client(_stream(first_text=False, timings=TIMINGS), []) as client:
        assert script.answer(client, "http://server", 1, {}) is None
    with _client(_stream(timings={"prompt_ms": 1.0}), []) as client:
        assert script.answer(client, "http://server", 1, {}) is None


def test_the_summary_gives_each_thread_counts_median_ratio_and_extremes() -> None:
    script = load_script("server_decode.py")
    rows = [
        {"threads": 2, "direct": 100.0, "fronde": 97.0, "direct_out_ms": 5.0, "fronde_out_ms": 7.0},
        {"threads": 2, "direct": 100.0, "fronde": 99.0, "direct_out_ms": 5.0, "fronde_out_ms": 6.0},
        {"threads": 2, "direct": 100.0, "fronde": 98.0, "direct_out_ms": 5.0, "fronde_out_ms": 8.0},
        {"threads": 1, "direct": 50.0, "fronde": 50.0},
    ]
    lines = script.summary(rows)
    assert lines[0].startswith("-t 2: through Fronde ÷ straight 0.980 [0.970, 0.990] over 3")
    assert "+2.00 ms [+1.00, +3.00]" in lines[1]
    # Rows without first-token figures (an older records file) give the rate line alone.
    assert lines[2].startswith("-t 1: through Fronde ÷ straight 1.000 [1.000, 1.000] over 1")
    assert len(lines) == 3
