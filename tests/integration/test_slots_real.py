"""Slot pinning on the real llama-server: each request next to the busy slots.

Real parts: llama-server b11434 with four slots (``backend.parallel = 4``) and
SmolLM2-135M-Instruct Q4_1. Left to itself, b11434 puts the first request on a fresh
server on its highest slot (least recently used, ties to the highest id).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.bench.load_mix import agent_mix

from .conftest import SMOLLM2, Serve, start_serve

pytestmark = pytest.mark.integration

LONG = {
    "model": "fronde:baseline",
    "messages": [{"role": "user", "content": "Count from 1 to 200, one number a line."}],
    "max_tokens": 400,
    "ignore_eos": True,  # llama-server's own field: the answer runs its whole budget
    "temperature": 0,
    "stream": True,
}


def processing(serve: Serve) -> set[int]:
    """The ids of the baseline server's slots that are generating now."""
    slots = httpx.get(f"{serve.base_url}/slots", params={"mode": "baseline"}, timeout=10).json()
    return {s["id"] for s in slots if s["is_processing"]}


@contextmanager
def streaming(serve: Serve) -> Generator[None]:
    """A streamed chat through Fronde, held open once its first token came."""
    with httpx.stream("POST", f"{serve.base_url}/v1/chat/completions", json=LONG, timeout=120) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        while not next(lines).startswith("data: {"):
            pass
        yield


def wait_until(serve: Serve, want: set[int], within_s: float = 3.0) -> set[int]:
    deadline = time.monotonic() + within_s
    got = processing(serve)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.05)
        got = processing(serve)
    return got


def test_a_request_to_an_idle_server_is_placed_there_and_the_next_ones_join_it(
    tmp_path: Path,
) -> None:
    env = {"FRONDE_PROFILE": SMOLLM2, "FRONDE_BACKEND__PARALLEL": "4"}
    serve = start_serve(tmp_path, "--mode", "baseline", env=env)
    try:
        with ExitStack() as second:
            with streaming(serve):
                # nothing held: the server places it (b11434 on a fresh server: slot 3)
                assert wait_until(serve, {3}) == {3}
                second.enter_context(streaming(serve))
                assert wait_until(serve, {2, 3}) == {2, 3}  # pinned beside it
            # the first client left: slot 3 frees, the next request joins slot 2
            assert wait_until(serve, {2}) == {2}
            with streaming(serve):
                assert wait_until(serve, {1, 2}) == {1, 2}
        # the same answer as the backend gives a request it places itself
        body = {**LONG, "stream": False, "max_tokens": 24}
        backend = serve.health()["backends"]["baseline"]["url"]
        pinned = httpx.post(f"{serve.base_url}/v1/chat/completions", json=body, timeout=120)
        alone = httpx.post(f"{backend}/v1/chat/completions", json=body, timeout=120)
        text = pinned.json()["choices"][0]["message"]["content"]
        assert text and text == alone.json()["choices"][0]["message"]["content"]
    finally:
        serve.stop()


def test_a_whole_answer_to_an_idle_server_is_placed_there_too(tmp_path: Path) -> None:
    # A whole answer's headers come with its end: the stream that comes while it runs
    # finds its slot in GET /slots, read until it shows.
    env = {"FRONDE_PROFILE": SMOLLM2, "FRONDE_BACKEND__PARALLEL": "4"}
    serve = start_serve(tmp_path, "--mode", "baseline", env=env)
    whole = {"prompt": "Count from 1 to 200:", "n_predict": 400, "ignore_eos": True}
    try:
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(
                httpx.post, f"{serve.base_url}/completion", json=whole, timeout=120
            )
            # nothing held: the server places it (b11434 on a fresh server: slot 3)
            assert wait_until(serve, {3}) == {3}
            with streaming(serve):
                assert wait_until(serve, {2, 3}) == {2, 3}  # pinned beside it
            r = answer.result()
        assert r.status_code == 200 and r.json()["tokens_predicted"] == 400
    finally:
        serve.stop()


def test_pinning_off_leaves_the_choice_to_the_server(tmp_path: Path) -> None:
    env = {
        "FRONDE_PROFILE": SMOLLM2,
        "FRONDE_BACKEND__PARALLEL": "4",
        "FRONDE_BACKEND__PIN_SLOTS": "false",
    }
    serve = start_serve(tmp_path, "--mode", "baseline", env=env)
    try:
        with streaming(serve):
            busy = wait_until(serve, {3})
        assert busy == {3}, busy  # b11434's own pick on a fresh server
    finally:
        serve.stop()


def messages_body(chat: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages body with a chat body's messages, budget and temperature."""
    system = [m["content"] for m in chat["messages"] if m["role"] == "system"]
    turns = [m for m in chat["messages"] if m["role"] != "system"]
    body = {"max_tokens": chat["max_tokens"], "temperature": 0, "messages": turns}
    return body | ({"system": system[0]} if system else {})


def test_one_client_at_a_time_gets_the_answers_of_the_server_alone(tmp_path: Path) -> None:
    # The eight agent-mix items of the README's quick load run (its screen left out
    # format-js-5), one at a time, as its c = 1 sends them: chat (streamed upstream),
    # then Anthropic Messages (a whole answer upstream, as Fronde passes it through).
    # Pinned to slot 0 each time, a request reused another cached prefix than where
    # llama-server put it itself, and near-ties flipped: on the H200 18 of 66 SmolLM2
    # answers differed from the plain server's (0 of 66 before pinning); here
    # format-js-2 did. With every slot free, Fronde leaves the choice to the server.
    items = agent_mix(items=8, skip=("format-js-5",)).items

    def answers(pin: str) -> dict[str, list[str]]:
        folder = tmp_path / f"pin-{pin}"
        folder.mkdir()
        env = {
            "FRONDE_PROFILE": SMOLLM2,
            "FRONDE_BACKEND__PARALLEL": "4",
            "FRONDE_BACKEND__PIN_SLOTS": pin,
        }
        serve = start_serve(folder, "--mode", "baseline", env=env)
        try:
            texts: dict[str, list[str]] = {"chat": [], "messages": []}
            for item in items:
                body = {**item.body("chat", 16), "stream": False}  # streamed upstream all the same
                del body["stream_options"]
                r = httpx.post(f"{serve.base_url}/v1/chat/completions", json=body, timeout=120)
                assert r.status_code == 200, r.text
                texts["chat"].append(r.json()["choices"][0]["message"]["content"])
            for item in items:
                body = messages_body(item.body("chat", 16))
                r = httpx.post(f"{serve.base_url}/v1/messages", json=body, timeout=120)
                assert r.status_code == 200, r.text
                texts["messages"].append(r.json()["content"][0]["text"])
            return texts
        finally:
            serve.stop()

    alone, pinned = answers("false"), answers("true")
    differ = {
        api: [i.id for i, a, b in zip(items, alone[api], pinned[api], strict=True) if a != b]
        for api in alone
    }
    assert differ == {"chat": [], "messages": []}, differ
