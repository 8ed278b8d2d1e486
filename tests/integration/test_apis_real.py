"""OpenAI Responses, Anthropic Messages and infill through Fronde on the real llama-server.

SmolLM2-135M-Instruct (it has a chat template) behind baseline and ngram-mod, driven with
the official ``openai`` and ``anthropic`` SDKs, streamed and not, including the SDKs'
own stream helpers, which check that every event arrives in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from openai import OpenAI

from .conftest import SMOLLM2, Serve, start_serve

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def smol(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """`fronde serve` on SmolLM2 with baseline and ngram-mod."""
    env = {"FRONDE_PROFILE": SMOLLM2}
    serve = start_serve(
        tmp_path_factory.mktemp("apis"), "--mode", "baseline", "--mode", "ngram-mod", env=env
    )
    yield serve
    serve.stop()


def row(serve: Serve, rid: str) -> dict[str, Any]:
    """The router's row for one request."""
    rows = httpx.get(f"{serve.base_url}/fronde/v1/router").json()["recent"]
    return next(r for r in rows if r["id"] == rid)


def is_sentence(text: str) -> bool:
    """Words, most of them different: an answer, not a loop."""
    words = text.split()
    return len(words) >= 3 and len(set(words)) > len(words) // 2


def test_openai_responses_whole_and_streamed(smol: Serve) -> None:
    with OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused", max_retries=0) as client:
        raw = client.responses.with_raw_response.create(
            model="fronde", input="Name three colours.", max_output_tokens=32, temperature=0
        )
        assert raw.headers["x-fronde-class"] in ("probe", "cache", "predicted", "fallback")
        whole = raw.parse()
        assert is_sentence(whole.output_text), whole.output_text
        with client.responses.stream(
            model="fronde:ngram-mod", input="Name three colours.", max_output_tokens=32
        ) as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    assert is_sentence(final.output_text)
    recent = httpx.get(f"{smol.base_url}/fronde/v1/router").json()["recent"]
    last = recent[-1]
    assert (last["mode"], last["status"]) == ("ngram-mod", "done")
    assert last["decode_tok_s"] > 0  # the stream's last event carried llama-server's timings


def test_a_second_responses_turn_with_a_typeless_assistant_item_answers(smol: Serve) -> None:
    """The SDKs' shorthand for an earlier answer, which b11434 refuses untyped
    ("Cannot determine type of 'item'"): every multi-turn Responses client sends it."""
    with OpenAI(base_url=f"{smol.base_url}/v1", api_key="unused", max_retries=0) as client:
        first = client.responses.create(
            model="fronde", input="Name a colour.", max_output_tokens=16, temperature=0
        )
        turns: Any = [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "Name another one."},
        ]
        raw = client.responses.with_raw_response.create(
            model="fronde", input=turns, max_output_tokens=16, temperature=0
        )
    assert raw.status_code == 200
    assert raw.parse().output_text.strip()


def test_a_matched_stop_sequence_is_anthropics_stop_reason(smol: Serve) -> None:
    """b11434 says end_turn for a stop string; Fronde says stop_sequence, streamed or not."""
    with anthropic.Anthropic(base_url=smol.base_url, api_key="unused", max_retries=0) as client:
        msg = client.messages.create(
            model="fronde",
            max_tokens=32,
            messages=[{"role": "user", "content": "Name three colours."}],
            stop_sequences=["e"],  # in any English answer of 32 tokens
            extra_body={"temperature": 0},
        )
        with client.messages.stream(
            model="fronde",
            max_tokens=32,
            messages=[{"role": "user", "content": "Name three colours."}],
            stop_sequences=["e"],
            extra_body={"temperature": 0},
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    said = "".join(b.text for b in msg.content if b.type == "text")
    assert "e" not in said and "e" not in text
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "e")
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "e")


def test_anthropic_messages_whole_and_streamed(smol: Serve) -> None:
    client = anthropic.Anthropic(base_url=smol.base_url, api_key="unused", max_retries=0)
    with client:
        msg = client.messages.create(
            model="fronde",
            max_tokens=32,
            messages=[{"role": "user", "content": "Name three colours."}],
        )
        block = msg.content[0]
        assert block.type == "text" and is_sentence(block.text), msg
        assert msg.usage.output_tokens > 0
        with client.messages.stream(
            model="fronde",
            max_tokens=32,
            messages=[{"role": "user", "content": "What is 2 + 2?"}],
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text and final.stop_reason in ("end_turn", "max_tokens")
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(model="fronde", max_tokens=8, messages=[])
    assert caught.value.body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "'messages' must be a non-empty array",
        },
    }


def test_responses_with_tools_are_plain_chat_and_logprobs_stay_on_baseline(smol: Serve) -> None:
    """SmolLM2's template takes no tools: llama-server decodes such a request as plain
    chat, so it is routed; logprobs broke under speculation in the matrix."""
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    body = {"input": "Weather in Paris?", "tools": tools, "max_output_tokens": 24}
    r = httpx.post(f"{smol.base_url}/v1/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["x-fronde-class"] != "unsafe-for-spec"
    body = {"input": "Weather in Paris?", "top_logprobs": 2, "max_output_tokens": 8}
    r = httpx.post(f"{smol.base_url}/v1/responses", json=body, timeout=120)
    assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == (
        "unsafe-for-spec",
        "baseline",
    )


def test_infill_on_a_model_without_fim_tokens_is_llama_servers_clean_error(smol: Serve) -> None:
    """Neither offline model has FIM tokens: the backend's refusal reaches the client whole."""
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", "n_predict": 8}
    r = httpx.post(f"{smol.base_url}/infill", json=body, timeout=120)
    assert r.status_code == 501, r.text
    assert "Infill is not supported by this model" in r.json()["error"]["message"]
    assert row(smol, r.headers["x-fronde-request-id"])["status"] == "error"


def test_count_tokens_passes_through(smol: Serve) -> None:
    body = {"model": "fronde", "messages": [{"role": "user", "content": "Hello there"}]}
    r = httpx.post(f"{smol.base_url}/v1/messages/count_tokens", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["input_tokens"] > 2


def test_a_whole_chat_answer_keeps_llama_servers_timings(smol: Serve) -> None:
    """Fronde asks for a stream and folds it; the timings of the usage chunk stay."""
    body = {"model": "fronde", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    data = httpx.post(f"{smol.base_url}/v1/chat/completions", json=body, timeout=120).json()
    assert data["timings"]["predicted_n"] == data["usage"]["completion_tokens"]
    assert data["timings"]["predicted_per_second"] > 0
