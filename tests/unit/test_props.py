"""One ``GET /props`` per backend: read once per base URL, shared by every reader.

Over fake llama-servers (tests/fakes) and ``httpx.MockTransport``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from fronde.backends.client import BackendClient
from fronde.backends.props import Props, PropsCache
from fronde.json_types import JSON

from .test_contract import chat, ready, sse_events
from .test_correctness import TOOLS, WORDS
from .test_single import single_client

PATCHED: JSON = {
    "speculative_per_request": True,
    "stream_sends_held_stop_text": True,
    "chat_template_caps": {"supports_tools": False, "supports_tool_calls": True},
    "default_generation_settings": {"params": {"speculative.types": "ngram-simple,ngram-mod"}},
}
"""``/props`` of a llama-server with Fronde's patch set (the fields Fronde reads)."""


def test_the_four_facts_are_read_typed() -> None:
    assert Props.parse(PATCHED) == Props(
        per_request_speculation=True,
        held_stop_text=True,
        spec_types=frozenset({"ngram-simple", "ngram-mod"}),
        supports_tools=False,
    )
    stock: JSON = {"default_generation_settings": {"params": {"speculative.types": "none"}}}
    assert Props.parse(stock) == Props(spec_types=frozenset())  # shown: no speculation
    assert Props.parse({}) == Props() == Props.parse([1])  # nothing shown, not a guess
    assert Props.parse({"speculative_per_request": "yes"}).per_request_speculation is False


def test_a_forgotten_url_is_read_again() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(200, json=PATCHED)

    async def run() -> list[Props | None]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            props = PropsCache(BackendClient(http))
            got = [await props.get("http://a"), await props.get("http://a")]
            props.forget("http://a")
            return [*got, await props.get("http://a"), await props.get("http://b")]

    got = asyncio.run(run())
    assert got == [Props.parse(PATCHED)] * 4
    assert calls == ["http://a/props", "http://a/props", "http://b/props"]


def props_reads(calls: Path) -> int:
    return calls.read_text().splitlines().count("GET /props")


def test_every_reader_shares_the_start_checks_read(fake_binary: Path, tmp_path: Path) -> None:
    """The start check, ``tool_choice`` and a stream's stop strings: one ``GET /props``."""
    calls = tmp_path / "calls.log"
    knobs = ("--fake-held-stop-text", "--fake-calls", str(calls))
    with single_client(fake_binary, tmp_path, *knobs) as c:
        ready(c)
        assert props_reads(calls) == 1  # the start check's, fresh on purpose
        body = chat(WORDS, tools=TOOLS, tool_choice="required")
        assert c.post("/v1/chat/completions", json=body).status_code == 200
        for _ in range(2):
            stream = {"prompt": WORDS, "max_tokens": 3, "stop": ["gamma x"]}
            assert sse_events(c, stream, "/v1/completions")[-1] == "[DONE]"
    assert props_reads(calls) == 1
