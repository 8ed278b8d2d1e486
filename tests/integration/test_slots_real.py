"""Slot pinning on the real llama-server: each request next to the busy slots.

Real parts: llama-server b11434 with four slots (``backend.parallel = 4``) and
SmolLM2-135M-Instruct Q4_1. Left to itself, b11434 puts the first request on a fresh
server on its highest slot (least recently used, ties to the highest id).
"""

from __future__ import annotations

import time
from collections.abc import Generator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

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


def test_requests_take_the_lowest_free_slots_and_a_freed_one_is_taken_again(
    tmp_path: Path,
) -> None:
    env = {"FRONDE_PROFILE": SMOLLM2, "FRONDE_BACKEND__PARALLEL": "4"}
    serve = start_serve(tmp_path, "--mode", "baseline", env=env)
    try:
        with ExitStack() as second:
            with streaming(serve):
                assert wait_until(serve, {0}) == {0}
                second.enter_context(streaming(serve))
                assert wait_until(serve, {0, 1}) == {0, 1}
            # the first client left: slot 0 frees, the next request takes it again
            assert wait_until(serve, {1}) == {1}
            with streaming(serve):
                assert wait_until(serve, {0, 1}) == {0, 1}
        # the same answer as the backend gives a request it places itself
        body = {**LONG, "stream": False, "max_tokens": 24}
        backend = serve.health()["backends"]["baseline"]["url"]
        pinned = httpx.post(f"{serve.base_url}/v1/chat/completions", json=body, timeout=120)
        alone = httpx.post(f"{backend}/v1/chat/completions", json=body, timeout=120)
        text = pinned.json()["choices"][0]["message"]["content"]
        assert text and text == alone.json()["choices"][0]["message"]["content"]
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
