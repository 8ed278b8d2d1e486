"""One ``GET /props`` per backend: read once per base URL, shared by every reader, and
read again once a remote server may have been restarted by its owner.

Over fake llama-servers (tests/fakes) and ``httpx.MockTransport``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool, PoolPlan
from fronde.backends.process import free_port
from fronde.backends.props import Props, PropsCache
from fronde.backends.remote import RemoteMode
from fronde.config import load_settings
from fronde.json_types import JSON
from fronde.modes import Mode

from .test_contract import chat, ready, sse_events
from .test_correctness import TOOLS, WORDS
from .test_remote import start_fake
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


def test_a_replica_that_fails_a_check_or_drops_a_request_is_forgotten() -> None:
    """Not only when it goes down: a restart shorter than three checks still fails one."""
    props = PropsCache(timeout_s=0.5)
    replicas = RemoteMode(Mode.BASELINE, ["http://127.0.0.1:9"], props=props)
    props.keep("http://127.0.0.1:9", Props(held_stop_text=True))
    replicas.failed("http://127.0.0.1:9", "ConnectError")
    assert not replicas.replicas[0].up  # one failure takes nothing down...
    # ...but the entry is gone: the next reader asks (port 9 refuses: unknown, not kept).
    assert asyncio.run(props.get("http://127.0.0.1:9")) is None


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


def streamed_text(c: TestClient) -> str:
    """A streamed completion whose budget ends inside a partial match of its stop string."""
    body = {"prompt": WORDS, "max_tokens": 3, "stop": ["gamma x"], "model": "fronde:baseline"}
    text = ""
    for event in sse_events(c, body, "/v1/completions"):
        if event != "[DONE]":
            text += "".join(ch.get("text") or "" for ch in json.loads(event)["choices"])
    return text


def stops_sent(record: Path) -> list[bool]:
    """Whether each completion body the fake recorded carried ``stop``."""
    bodies = [json.loads(line)["body"] for line in record.read_text().splitlines()]
    return ["stop" in b for b in bodies if "max_tokens" in b]


def replica_up(c: TestClient) -> bool:
    return c.get("/health").json()["backends"]["baseline"]["replicas"][0]["up"]


def test_a_remote_server_restarted_without_the_patch_is_read_again(
    fake_binary: Path, tmp_path: Path
) -> None:
    """Its owner restarts it as a stock build: Fronde takes the stop strings back, so the
    text held back at the budget still reaches the client."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    log = tmp_path / "replica.log"
    patched = start_fake(
        fake_binary, port, log, "--fake-held-stop-text", "--fake-record", str(before)
    )
    stock = None
    pool = BackendPool(PoolPlan({}, {}, {Mode.BASELINE: [url]}), stop_grace_s=1.0)
    router = {"max_parallel_decodes": 4, "load_rule": "off"}
    settings = load_settings(
        cache_dir=tmp_path, models_dir=tmp_path, modes=["baseline"], router=router
    )
    try:
        with TestClient(create_app(settings, pool=pool)) as c:
            ready(c)
            assert streamed_text(c) == "alpha beta gamma "
            assert stops_sent(before) == [True]  # the patched server applies them
            patched.kill()
            patched.wait()
            for _ in range(100):
                if not replica_up(c):
                    break
                time.sleep(0.1)
            assert not replica_up(c)
            stock = start_fake(fake_binary, port, log, "--fake-record", str(after))
            for _ in range(100):
                if replica_up(c):
                    break
                time.sleep(0.1)
            assert replica_up(c)
            assert streamed_text(c) == "alpha beta gamma "
            assert stops_sent(after) == [False]  # Fronde matches them: the stock one drops
    finally:
        for proc in (patched, stock):
            if proc is not None:
                proc.kill()
                proc.wait()
