"""``/v1/completions`` with ``prompt`` a list of prompts: one choice per prompt.

The fake answers a list as llama-server b11434 does with one slot (one task per
prompt, ``data: null`` between them in a stream); the ``openai`` SDK drives Fronde, as
LangChain's batches do. The relay's per-choice state is also driven directly with the
interleaved chunks of parallel slots.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from fronde.backends.client import UpstreamStream
from fronde.request.collect import collect
from fronde.request.relay import OwnedStops, relay_sse

from .test_contract import ORIGINAL_ROUTER, sse_events


def sdk(c: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=c)


def texts_of(chunks: list[Any]) -> dict[int, str]:
    """Each choice's streamed text, by index."""
    out: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            out[ch.index] = out.get(ch.index, "") + ch.text
    return out


@pytest.mark.parametrize("model", ["fronde:baseline", "fronde"])
def test_two_prompts_get_two_choices_and_summed_usage(plain: TestClient, model: str) -> None:
    whole = sdk(plain).completions.create(
        model=model, prompt=["alpha beta", "gamma delta"], max_tokens=4
    )
    assert [(c.index, c.text, c.finish_reason) for c in whole.choices] == [
        (0, "alpha beta alpha beta ", "length"),
        (1, "gamma delta gamma delta ", "length"),
    ]
    assert whole.usage is not None  # the fake counts 10 prompt tokens a prompt
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (20, 8)
    assert whole.usage.total_tokens == 28


def test_lists_of_token_ids_are_one_prompt_or_several(plain: TestClient) -> None:
    one = sdk(plain).completions.create(model="fronde:baseline", prompt=[11, 12], max_tokens=2)
    assert [(c.index, c.text) for c in one.choices] == [(0, "11 12 ")]
    two = sdk(plain).completions.create(
        model="fronde:baseline", prompt=[[11, 12], [13]], max_tokens=2
    )
    assert [(c.index, c.text) for c in two.choices] == [(0, "11 12 "), (1, "13 13 ")]


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_streamed_list_reaches_the_sdk_choice_by_choice(
    plain: TestClient, include_usage: bool
) -> None:
    stream = sdk(plain).completions.create(
        model="fronde:baseline",
        prompt=["alpha beta", "gamma delta"],
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": include_usage},
    )
    chunks = list(stream)  # b11434's "data: null" between the prompts raised AttributeError
    assert texts_of(chunks) == {0: "alpha beta alpha beta ", 1: "gamma delta gamma delta "}
    finishes = {ch.index: ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason}
    assert finishes == {0: "length", 1: "length"}
    with_usage = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert len(with_usage) == 1 and with_usage[0] is chunks[-1]
        assert with_usage[0].choices == []
        usage = with_usage[0].usage
        assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (20, 8)
    else:
        assert with_usage == []


def test_no_null_event_and_one_done_reach_the_client(plain: TestClient) -> None:
    body = {"model": "fronde:baseline", "prompt": ["a b", "c d", "e f"], "max_tokens": 2}
    events = sse_events(plain, body, path="/v1/completions")
    assert "null" not in events
    assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
    indexes = [json.loads(e)["choices"][0]["index"] for e in events[:-1]]
    assert sorted(set(indexes)) == [0, 1, 2]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_are_matched_per_choice(plain: TestClient, stream: bool) -> None:
    # Glued, "alpha beta " + "gamma delta " holds "beta gamma": neither choice does.
    # And a stop string that ends choice 0 leaves choice 1 running.
    prompts = ["alpha beta", "gamma delta", "zero one two"]
    stop = ["beta gamma", "one"]
    if stream:
        chunks = list(
            sdk(plain).completions.create(
                model="fronde:baseline", prompt=prompts, max_tokens=2, stop=stop, stream=True
            )
        )
        got = texts_of(chunks)
        finishes = {ch.index: ch.finish_reason for c in chunks for ch in c.choices}
    else:
        whole = sdk(plain).completions.create(
            model="fronde:baseline", prompt=prompts, max_tokens=2, stop=stop
        )
        got = {c.index: c.text for c in whole.choices}
        finishes = {c.index: c.finish_reason for c in whole.choices}
    assert got == {0: "alpha beta ", 1: "gamma delta ", 2: "zero "}
    assert finishes == {0: "length", 1: "length", 2: "stop"}


def test_a_one_string_list_is_routed_as_the_string(serve: Any) -> None:
    c = serve(router=ORIGINAL_ROUTER)  # a string prompt is probed: the answer says so
    for prompt in ("alpha beta gamma", ["delta epsilon zeta"]):
        r = c.post("/v1/completions", json={"model": "fronde", "prompt": prompt, "max_tokens": 4})
        assert r.status_code == 200, r.text
        [choice] = r.json()["choices"]
        assert choice["index"] == 0 and choice["text"]
        assert "fronde" in r.json(), f"{prompt!r} was not probed"


@pytest.mark.parametrize("stream", [False, True])
def test_an_empty_prompt_list_is_an_openai_400(plain: TestClient, stream: bool) -> None:
    r = plain.post(
        "/v1/completions", json={"model": "fronde", "prompt": [], "max_tokens": 4, "stream": stream}
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == (
        "invalid_request_error",
        "prompt",
        "invalid_request",
    )
    assert "x-fronde-mode" not in r.headers  # refused before any backend saw it


@pytest.mark.parametrize("prompt", [[None, None], ["a", None], [1.5], [["a", None]], [True]])
def test_a_prompt_list_item_llama_server_cannot_read_is_an_openai_400(
    plain: TestClient, prompt: list[Any]
) -> None:
    r = plain.post("/v1/completions", json={"model": "fronde", "prompt": prompt, "max_tokens": 4})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "prompt"
    assert "x-fronde-mode" not in r.headers


# --- parallel slots: the prompts' chunks interleave --------------------------------------


def _chunk(index: int, text: str, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"text": text, "index": index, "logprobs": None, "finish_reason": finish}
    event = {"id": "c", "object": "text_completion", "choices": [choice], **extra}
    return f"data: {json.dumps(event)}\n\n".encode()


def _usage(n: int) -> dict[str, int]:
    return {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}


INTERLEAVED = [
    _chunk(0, "one "),
    b"data: null\n\n",
    _chunk(1, "uno "),
    _chunk(0, "END "),
    _chunk(1, "dos "),
    _chunk(0, "three "),
    _chunk(0, "", "length", usage=_usage(3)),
    _chunk(1, "", "length", usage=_usage(2)),
    b"data: [DONE]\n\n",
]


async def _reads(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def _relayed(stops: OwnedStops | None) -> bytes:
    class Body(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for part in _reads(INTERLEAVED):
                yield part

    upstream = UpstreamStream(httpx.Response(200, stream=Body()), "http://x")

    async def run() -> bytes:
        relayed = relay_sse(upstream, "baseline", include_usage=True, stops=stops)
        return b"".join([piece async for piece in relayed])

    return asyncio.run(run())


def test_interleaved_choices_are_folded_apart_with_their_usage_summed() -> None:
    out = _relayed(None)
    assert b"data: null" not in out
    whole = asyncio.run(collect(_reads([out]), "text"))
    assert [(c["index"], c["text"]) for c in whole["choices"]] == [
        (0, "one END three "),
        (1, "uno dos "),
    ]
    assert whole["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def test_a_stop_string_in_one_interleaved_choice_leaves_the_other_running() -> None:
    _, stops = OwnedStops.take({"prompt": ["a", "b"], "stop": ["END"]}, chat=False)
    out = _relayed(stops)
    whole = asyncio.run(collect(_reads([out]), "text"))
    assert [(c["index"], c["text"], c["finish_reason"]) for c in whole["choices"]] == [
        (0, "one ", "stop"),
        (1, "uno dos ", "length"),
    ]
    assert out.count(b"[DONE]") == 1
