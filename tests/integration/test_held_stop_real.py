"""Patch 0009 on real parts: a stream that ends at its budget keeps the text held back for
a stop string, as the whole answer does.

Real parts: the llama-server `fronde install` built (patched by default; the test skips,
saying so, on a stock build) serving SmolLM2-135M as Fronde's baseline server. b11434 held
back the tail that could start a stop string and, in a stream, never sent it when the
budget ran out (docs/llama-patches.md, "A stream that ends at its budget keeps its last
text"); Fronde then had to match a stream's stop strings itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fronde.backends.client import BackendClient
from fronde.backends.held_stop import HELD_STOP_FLAG, HeldStopText
from fronde.backends.props import PropsCache
from fronde.json_types import JSONObject
from fronde.modes import Mode
from fronde.request.collect import answer_whole

from .conftest import SMOLLM2, patched_server
from .test_per_request_spec_real import server_argv

pytestmark = pytest.mark.integration

PROMPT = "The three primary colours are"
BUDGET = 12


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """SmolLM2 as Fronde's baseline server, one slot: its base URL."""
    log = tmp_path_factory.mktemp("held-stop") / "server.log"
    argv = server_argv(SMOLLM2, Mode.BASELINE, ("-np", "1"))
    with patched_server(argv, log, HELD_STOP_FLAG) as url:
        yield url


def complete(url: str, stream: bool, stop: list[str] | None = None) -> tuple[str, str]:
    """A greedy ``/v1/completions`` of :data:`BUDGET` tokens: (text, finish_reason)."""
    body: dict[str, object] = {"prompt": PROMPT, "max_tokens": BUDGET, "temperature": 0}
    body |= {"stream": stream, "cache_prompt": False} | ({"stop": stop} if stop else {})
    if not stream:
        choice = httpx.post(url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
        return choice["text"], choice["finish_reason"]
    text, finish = "", ""
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                event: dict[str, Any] = json.loads(line[6:])
                choices: list[dict[str, Any]] = event.get("choices") or []
                for choice in choices:
                    text += str(choice.get("text") or "")
                    finish = str(choice.get("finish_reason") or finish)
    return text, finish


def fronde_whole(base: str, body: JSONObject) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Fronde's whole answer to ``body`` from ``base`` (``answer_whole``), and each body it
    sent upstream."""
    sent: list[dict[str, Any]] = []

    async def seen(request: httpx.Request) -> None:
        if request.method == "POST":
            sent.append(json.loads(request.content))

    async def whole() -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=60, event_hooks={"request": [seen]}) as http:
            client = BackendClient(http)
            held = HeldStopText(PropsCache(client))
            return await answer_whole(client, base, "/v1/completions", body, "baseline", held=held)

    return asyncio.run(whole()), sent


def test_a_stream_ending_at_its_budget_in_a_partial_stop_keeps_its_tail(base: str) -> None:
    """The answer's last characters start the stop string when the budget ends: the
    stream sends them, as the whole answer keeps them (b11434's stream dropped them)."""
    free, _ = complete(base, stream=False)
    assert len(free.strip()) >= 3, free
    stop = [free[-3:] + "\u2603never"]  # a tail that starts the stop string, never completed
    whole = complete(base, stream=False, stop=stop)
    streamed = complete(base, stream=True, stop=stop)
    assert whole == (free, "length")
    assert streamed == whole


def test_a_whole_answer_leaves_the_stop_upstream_and_equals_the_stream(base: str) -> None:
    """Fronde's whole answer (``answer_whole``: asked whole where patch 0010 is, else as
    a stream) whose budget ends in a partial stop match: on the patched server its
    ``stop`` goes upstream, and the answer is the stream's text, tail included."""
    free, _ = complete(base, stream=False)
    stop = [free[-3:] + "\u2603never"]
    streamed = complete(base, stream=True, stop=stop)
    assert streamed == (free, "length")
    body: JSONObject = {"prompt": PROMPT, "max_tokens": BUDGET, "temperature": 0}
    body |= {"cache_prompt": False, "stop": [stop[0]]}
    data, sent = fronde_whole(base, body)
    choice: dict[str, Any] = data["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == streamed
    assert [b.get("stop") for b in sent] == [stop]  # llama-server matched it, not Fronde
    assert "timings_per_token" not in sent[0]
