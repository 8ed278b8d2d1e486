"""The OpenAI contract against real llama-server b11434 backends and gemma-3-270m.

Driven with the official `openai` SDK, sync and async, as agent tools drive Fronde.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletionToolParam

from .conftest import Serve

pytestmark = pytest.mark.integration


def sync_client(serve: Serve) -> OpenAI:
    return OpenAI(base_url=f"{serve.base_url}/v1", api_key="x", max_retries=0, timeout=120)


def test_async_sdk_streamed_and_not(real_serve: Serve) -> None:
    async def run() -> tuple[str, str]:
        client = AsyncOpenAI(
            base_url=f"{real_serve.base_url}/v1", api_key="x", max_retries=0, timeout=120
        )
        whole = await client.completions.create(
            model="fronde:baseline", prompt="The capital of France is", max_tokens=12, temperature=0
        )
        stream = await client.completions.create(
            model="fronde:baseline",
            prompt="The capital of France is",
            max_tokens=12,
            temperature=0,
            stream=True,
        )
        parts = [c.choices[0].text async for c in stream if c.choices]
        await client.close()
        return whole.choices[0].text, "".join(parts)

    whole, streamed = asyncio.run(run())
    assert whole.strip()
    assert streamed == whole  # same greedy answer, streamed or not, on one backend


def test_stop_ends_the_answer_before_the_stop_string(real_serve: Serve) -> None:
    client = sync_client(real_serve)
    prompt = "1, 2, 3, 4, 5, 6,"
    free = client.completions.create(
        model="fronde:baseline", prompt=prompt, max_tokens=16, temperature=0
    )
    text = free.choices[0].text
    assert "9" in text, f"the model did not count on: {text!r}"
    stopped = client.completions.create(
        model="fronde:baseline", prompt=prompt, max_tokens=16, temperature=0, stop=["9"]
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].text == text[: text.index("9")]


@pytest.mark.parametrize("include", [True, False])
def test_include_usage_gives_exactly_one_usage_chunk_or_none(
    real_serve: Serve, include: bool
) -> None:
    stream = sync_client(real_serve).chat.completions.create(
        model="fronde:ngram-simple",
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": include},
    )
    chunks = list(stream)
    with_usage = [c for c in chunks if c.usage is not None]
    if include:
        assert len(with_usage) == 1 and with_usage[0].choices == []
        assert with_usage[0] is chunks[-1]
        assert 0 < with_usage[0].usage.completion_tokens <= 10  # type: ignore[union-attr]
    else:
        assert with_usage == []


def test_done_comes_exactly_once(real_serve: Serve) -> None:
    body = {
        "model": "fronde",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{real_serve.base_url}/v1/chat/completions", json=body, timeout=120
    ) as r:
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines.count("data: [DONE]") == 1 and lines[-1] == "data: [DONE]"


@pytest.mark.parametrize(
    "prompt",
    ["Le café de la gare coûte", "東京の天気は晴れです。明日の", "Rocket 🚀 and globe 🌍 and"],
)
def test_streamed_text_never_splits_a_character(real_serve: Serve, prompt: str) -> None:
    client = sync_client(real_serve)
    whole = client.completions.create(
        model="fronde:baseline", prompt=prompt, max_tokens=24, temperature=0
    )
    stream = client.completions.create(
        model="fronde:baseline", prompt=prompt, max_tokens=24, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].text for c in stream if c.choices)
    assert "\ufffd" not in streamed
    assert streamed == whole.choices[0].text


def test_tools_reach_the_backend_and_come_back(real_serve: Serve) -> None:
    tools: list[ChatCompletionToolParam] = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    raw = sync_client(real_serve).chat.completions.with_raw_response.create(
        model="fronde",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools,
        max_tokens=16,
        temperature=0,
    )
    # With --no-jinja llama-server answered 500 here; Fronde's Jinja template fixes that.
    # gemma's turn template takes no tools: the request is plain chat, routed as such.
    assert raw.headers["x-fronde-class"] != "unsafe-for-spec"
    choice = raw.parse().choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")


def test_n_above_one_is_a_clear_400(real_serve: Serve) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sync_client(real_serve).chat.completions.create(
            model="fronde", messages=[{"role": "user", "content": "hi"}], n=2
        )
    assert "'n'" in str(info.value)


def test_a_prompt_over_the_context_is_context_length_exceeded(real_serve: Serve) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sync_client(real_serve).completions.create(
            model="fronde:baseline", prompt="word " * 6000, max_tokens=4
        )
    body = info.value.body
    assert isinstance(body, dict)
    assert body.get("code") == "context_length_exceeded"  # type: ignore[union-attr]
    assert "4096" in str(body.get("message"))  # type: ignore[union-attr]


def test_client_disconnect_frees_the_real_slot_within_a_second(real_serve: Serve) -> None:
    base = real_serve.base_url
    body = {"model": "fronde:baseline", "prompt": "Once upon a time", "max_tokens": 400}
    with httpx.stream(
        "POST", f"{base}/v1/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        lines = r.iter_lines()
        while not next(lines).startswith("data: {"):
            pass
        slots = httpx.get(f"{base}/slots", params={"mode": "baseline"}, timeout=10).json()
        assert slots[0]["is_processing"] is True
    left = time.monotonic()
    while time.monotonic() - left < 1.0:
        slots = httpx.get(f"{base}/slots", params={"mode": "baseline"}, timeout=10).json()
        if not slots[0]["is_processing"]:
            return
        time.sleep(0.05)
    raise AssertionError("llama-server still generating 1 s after the client left")
