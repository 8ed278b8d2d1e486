"""A server whose streams keep the text held back for a stop string (patch 0009) applies a
relayed stream's stop strings itself; on any other server Fronde matches them, and the client
reads the same text either way."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from fronde.backends.client import BackendClient
from fronde.backends.held_stop import HELD_STOP_FLAG, HeldStopText
from fronde.backends.props import PropsCache
from fronde.modes import Mode

from .test_contract import MODES
from .test_correctness import WORDS, both


def generation_bodies(records: list[Path]) -> list[dict[str, Any]]:
    """The completion bodies the fake backends received (``--fake-record``), in order."""
    out: list[dict[str, Any]] = []
    for path in records:
        if path.exists():
            for line in path.read_text().splitlines():
                body: Any = json.loads(line)["body"]
                if isinstance(body, dict) and "max_tokens" in body:
                    out.append(cast("dict[str, Any]", body))
    return out


def _streamed_bodies(records: list[Path]) -> list[dict[str, Any]]:
    """The streamed completion bodies the fake backends received."""
    return [b for b in generation_bodies(records) if b.get("stream")]


@pytest.mark.parametrize("held", [True, False], ids=["patched", "stock"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_the_stop_strings_go_upstream_only_where_the_stream_keeps_held_text(
    serve: Any, tmp_path: Path, held: bool, path: str
) -> None:
    """ "gamma " starts the stop string when the budget ends: streamed and whole read the
    same text; the stream's body upstream keeps ``stop`` (and asks no per-token timings)
    only on a server whose /props says it sends held text."""
    records = [tmp_path / f"{m}.jsonl" for m in MODES]
    knobs: dict[Mode, list[str]] = {
        m: ["--fake-record", str(r), *(["--fake-held-stop-text"] if held else [])]
        for m, r in zip(MODES, records, strict=True)
    }
    c = serve(knobs)
    body: dict[str, Any] = {"max_tokens": 3, "stop": ["gamma x"], "model": "fronde:baseline"}
    body |= {"messages": [{"role": "user", "content": WORDS}]} if "chat" in path else {}
    body |= {} if "chat" in path else {"prompt": WORDS}
    expected = ("alpha beta gamma ", "length")
    assert both(c, body, path) == [expected, expected]
    streamed = _streamed_bodies(records)[-1]
    assert ("stop" in streamed) is held
    assert ("timings_per_token" in streamed) is not held


@pytest.mark.parametrize("held", [True, False], ids=["patched", "stock"])
@pytest.mark.parametrize("route", ["chat", "text", "batch"])
def test_a_whole_answer_leaves_its_stop_strings_upstream_where_the_stream_keeps_held_text(
    serve: Any, tmp_path: Path, held: bool, route: str
) -> None:
    """A non-streamed answer (also asked for as a stream, fronde.request.collect), one by
    itself or in a batch, follows the stream's rule: its body upstream keeps ``stop`` (and
    asks no per-token timings) only on a server whose /props says it sends held text, and
    the client reads the same text on either server."""
    records = [tmp_path / f"{m}.jsonl" for m in MODES]
    knobs: dict[Mode, list[str]] = {
        m: ["--fake-record", str(r), *(["--fake-held-stop-text"] if held else [])]
        for m, r in zip(MODES, records, strict=True)
    }
    c = serve(knobs)
    body: dict[str, Any] = {"max_tokens": 3, "stop": ["gamma x"], "model": "fronde:baseline"}
    if route == "text":
        body["prompt"] = WORDS
    else:
        body["messages"] = [{"role": "user", "content": WORDS}]
    if route == "batch":
        r = c.post("/fronde/v1/batch", json={"requests": [body]})
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()["data"][0]["body"]
    else:
        path = "/v1/completions" if route == "text" else "/v1/chat/completions"
        r = c.post(path, json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
    choice: dict[str, Any] = answer["choices"][0]
    text = choice["text"] if route == "text" else choice["message"]["content"]
    assert (text, choice["finish_reason"]) == ("alpha beta gamma ", "length")
    (sent,) = _streamed_bodies(records)  # the one generation, streamed upstream
    assert ("stop" in sent) is held
    assert ("timings_per_token" in sent) is not held


class _Props:
    """A /props handler: fails ``fail`` times, then answers ``props``; counts calls."""

    def __init__(self, props: dict[str, Any], fail: int = 0) -> None:
        self.props, self.fail, self.calls = props, fail, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        if self.calls <= self.fail:
            return httpx.Response(503, json={"error": {"message": "loading"}})
        return httpx.Response(200, json=self.props)


def _ask(handler: _Props, times: int) -> list[bool]:
    async def run() -> list[bool]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            held = HeldStopText(PropsCache(BackendClient(http)))
            return [await held.sent("http://backend") for _ in range(times)]

    return asyncio.run(run())


def test_the_flag_is_read_once_and_kept() -> None:
    handler = _Props({HELD_STOP_FLAG: True})
    assert _ask(handler, 3) == [True, True, True]
    assert handler.calls == 1


def test_a_failed_props_reads_false_and_is_asked_again() -> None:
    handler = _Props({HELD_STOP_FLAG: True}, fail=1)
    assert _ask(handler, 2) == [False, True]
    assert handler.calls == 2


def test_a_server_without_the_flag_keeps_fronde_matching() -> None:
    handler = _Props({"speculative_per_request": True})
    assert _ask(handler, 2) == [False, False]
    assert handler.calls == 1
