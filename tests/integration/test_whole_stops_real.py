"""Patch 0010 on real parts: a non-streamed request whose client has gone frees its slot
while another slot decodes, so Fronde asks llama-server for a whole answer whole.

Real parts: the llama-server `fronde install` built (patched by default; the test skips,
saying so, on a stock build) serving SmolLM2-135M as Fronde's baseline server, two slots.
b11434 polled a non-streamed request's connection only after a second with no result of
any task: with another slot streaming, a request whose client had left decoded to its
last token (docs/llama-patches.md, "A whole answer stops for a gone client").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fronde.backends.props import WHOLE_STOPS_FLAG
from fronde.modes import Mode

from .conftest import SMOLLM2, patched_server
from .test_held_stop_real import fronde_whole
from .test_per_request_spec_real import server_argv

pytestmark = pytest.mark.integration

LONG = {"prompt": "Write a long story about a lighthouse.", "temperature": 0, "ignore_eos": True}
"""A generation that runs for seconds on the 2-core CPU (with ``max_tokens``)."""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """SmolLM2 as Fronde's baseline server, two slots: its base URL."""
    log = tmp_path_factory.mktemp("whole-stops") / "server.log"
    argv = server_argv(SMOLLM2, Mode.BASELINE, ("-np", "2"))
    with patched_server(argv, log, WHOLE_STOPS_FLAG) as url:
        yield url


def busy_slots(url: str) -> int:
    """How many of the server's slots are processing."""
    slots: list[dict[str, Any]] = httpx.get(url + "/slots", timeout=10).json()
    return sum(1 for s in slots if s.get("is_processing"))


def test_a_gone_clients_whole_answer_frees_its_slot_while_a_stream_decodes(base: str) -> None:
    """A stream holds one slot for the whole test; a non-streamed request's client leaves
    after 1 s. Its slot is free within 2.5 s (the server polls once a second), while the
    stream still decodes."""
    streaming = threading.Event()
    stop = threading.Event()

    def stream() -> None:
        body = LONG | {"max_tokens": 4000, "stream": True}
        with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
            for _ in r.iter_lines():
                streaming.set()
                if stop.is_set():
                    return

    holder = threading.Thread(target=stream)
    holder.start()
    try:
        assert streaming.wait(60)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                base + "/v1/completions",
                json=LONG | {"max_tokens": 4000},
                timeout=httpx.Timeout(10, read=1.0),
            )
        left = time.monotonic()
        while busy_slots(base) > 1 and time.monotonic() - left < 2.5:
            time.sleep(0.05)
        assert busy_slots(base) == 1  # the stream's, still decoding
    finally:
        stop.set()
        holder.join(60)


def test_fronde_asks_one_non_streamed_request_and_passes_the_servers_answer_on(
    base: str,
) -> None:
    """``answer_whole`` on the patched server: one request with ``"stream": false``, and
    the answer is the server's own to the same body (text, finish, usage)."""
    body: dict[str, Any] = {"prompt": "The three primary colours are", "max_tokens": 12}
    body |= {"temperature": 0, "cache_prompt": False}
    own: dict[str, Any] = httpx.post(base + "/v1/completions", json=body, timeout=60).json()
    data, sent = fronde_whole(base, body)
    assert [b.get("stream") for b in sent] == [False]
    assert data["choices"][0]["text"] == own["choices"][0]["text"]
    assert data["choices"][0]["finish_reason"] == own["choices"][0]["finish_reason"]
    assert data["usage"]["completion_tokens"] == own["usage"]["completion_tokens"]
    assert data["timings"]["predicted_n"] == own["timings"]["predicted_n"]
