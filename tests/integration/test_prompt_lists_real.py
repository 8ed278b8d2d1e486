"""``/v1/completions`` with a list of prompts on real llama-server b11434 and gemma-3-270m:
Fronde's choices are the ones llama-server gives alone, streamed and not, and its usage
is their sum."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI

from .conftest import Serve

pytestmark = pytest.mark.integration

PROMPTS = ["The capital of France is", "1, 2, 3, 4,"]
MAX_TOKENS = 12
BODY: dict[str, Any] = {"prompt": PROMPTS, "max_tokens": MAX_TOKENS, "temperature": 0}


def direct_stream(url: str) -> tuple[dict[int, str], dict[int, str], list[dict[str, Any]]]:
    """llama-server's own stream: (text by index, finish by index, each prompt's usage)."""
    texts: dict[int, str] = {}
    finishes: dict[int, str] = {}
    usages: list[dict[str, Any]] = []
    nulls = 0
    with httpx.stream(
        "POST", f"{url}/v1/completions", json={**BODY, "stream": True}, timeout=300
    ) as r:
        for line in r.iter_lines():
            if line == "data: null":
                nulls += 1  # its "begin" of the second prompt: what Fronde must not relay
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            for ch in event["choices"]:
                texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
                if ch["finish_reason"]:
                    finishes[ch["index"]] = ch["finish_reason"]
            if event.get("usage"):
                usages.append(event["usage"])
    assert nulls == 1, "b11434 no longer sends data: null between prompts; see choices.py"
    return texts, finishes, usages


def test_a_prompt_list_gets_llama_servers_own_choices(real_serve: Serve) -> None:
    url = real_serve.health()["backends"]["baseline"]["url"]
    alone = httpx.post(f"{url}/v1/completions", json=BODY, timeout=300).json()
    texts, finishes, usages = direct_stream(url)
    expected = [(c["index"], c["text"], c["finish_reason"]) for c in alone["choices"]]
    assert [i for i, _, _ in expected] == [0, 1]
    assert {i: t for i, t, _ in expected} == texts  # llama-server agrees with itself

    client = OpenAI(base_url=f"{real_serve.base_url}/v1", api_key="x", max_retries=0, timeout=300)
    whole = client.completions.create(
        model="fronde:baseline", prompt=PROMPTS, max_tokens=MAX_TOKENS, temperature=0
    )
    assert [(c.index, c.text, c.finish_reason) for c in whole.choices] == expected
    assert whole.usage is not None
    summed = (sum(u["prompt_tokens"] for u in usages), sum(u["completion_tokens"] for u in usages))
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == summed

    chunks = list(
        client.completions.create(
            model="fronde:baseline",
            prompt=PROMPTS,
            max_tokens=MAX_TOKENS,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    got: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            got[ch.index] = got.get(ch.index, "") + ch.text
    assert got == texts
    got_finish = {
        ch.index: ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason
    }
    assert got_finish == finishes
    [tail] = [c for c in chunks if c.usage is not None]
    assert tail is chunks[-1] and tail.choices == [] and tail.usage is not None
    assert (tail.usage.prompt_tokens, tail.usage.completion_tokens) == summed
