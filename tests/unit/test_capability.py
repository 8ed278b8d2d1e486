"""Whether a llama-server honours per-request speculation: the fake with and without
``--fake-per-request-spec`` (a patched and a stock b11434), and servers that say one
thing and do another (httpx mock transports)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.backends.capability import (
    PER_REQUEST_FLAG,
    PerRequestSpeculation,
    check_per_request_speculation,
)
from fronde.backends.client import BackendClient
from fronde.backends.process import free_port
from fronde.errors import BackendConnectionError

CASCADE = "ngram-simple,ngram-mod"


@contextlib.contextmanager
def fake_server(fake_binary: Path, *args: str) -> Generator[str]:
    """The fake llama-server on a free port with ``args``; yields its base URL."""
    port = free_port()
    argv = [str(fake_binary), "--port", str(port), "--fake-tps", "2000", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def check(base: str, transport: httpx.AsyncBaseTransport | None = None) -> PerRequestSpeculation:
    async def run() -> PerRequestSpeculation:
        async with httpx.AsyncClient(transport=transport, timeout=30) as http:
            return await check_per_request_speculation(BackendClient(http), base)

    return asyncio.run(run())


def test_a_patched_cascade_server_is_supported(fake_binary: Path) -> None:
    with fake_server(fake_binary, "--spec-type", CASCADE, "--fake-per-request-spec") as base:
        got = check(base)
    assert got == PerRequestSpeculation(advertised=True, refuses_bad_value=True, draft_n=0)
    assert got.supported and got.reason == ""


def test_a_patched_plain_server_is_supported(fake_binary: Path) -> None:
    with fake_server(fake_binary, "--fake-per-request-spec") as base:
        assert check(base).supported


def test_a_stock_server_is_not_asked_to_generate(fake_binary: Path, tmp_path: Path) -> None:
    record = tmp_path / "posts.jsonl"
    with fake_server(fake_binary, "--spec-type", CASCADE, "--fake-record", str(record)) as base:
        got = check(base)
    assert not got.supported and not got.advertised
    assert PER_REQUEST_FLAG in got.reason and "fronde install" in got.reason
    assert not record.exists()  # /props alone told


def mock(answer: Callable[[httpx.Request], httpx.Response]) -> httpx.MockTransport:
    return httpx.MockTransport(answer)


def props_then(completion: Callable[[dict[str, Any]], httpx.Response]) -> httpx.MockTransport:
    """A server whose /props advertises the fields and whose /completion is ``completion``."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(200, json={PER_REQUEST_FLAG: True})
        return completion(json.loads(request.content))

    return mock(answer)


def test_a_flag_without_the_400_is_not_trusted() -> None:
    got = check("http://x", props_then(lambda body: httpx.Response(200, json={"content": ""})))
    assert got.advertised and not got.refuses_bad_value and not got.supported
    assert "speculative.n_max = -1 was accepted" in got.reason


def test_a_flag_with_drafts_under_n_max_0_is_not_trusted() -> None:
    def completion(body: dict[str, Any]) -> httpx.Response:
        if body["speculative.n_max"] < 0:
            return httpx.Response(400, json={"error": {"code": 400, "message": "bad"}})
        assert body["speculative.n_max"] == 0 and body["temperature"] == 0
        return httpx.Response(200, json={"timings": {"draft_n": 30, "draft_n_accepted": 28}})

    got = check("http://x", props_then(completion))
    assert got.refuses_bad_value and got.draft_n == 30 and not got.supported
    assert got.reason == "drafted 30 tokens under speculative.n_max = 0"


def test_no_draft_fields_count_as_zero_drafted() -> None:
    def completion(body: dict[str, Any]) -> httpx.Response:
        if body["speculative.n_max"] < 0:
            return httpx.Response(400, json={"error": {"code": 400, "message": "bad"}})
        return httpx.Response(200, json={"timings": {"predicted_n": 48}})

    assert check("http://x", props_then(completion)).supported


def test_a_server_that_is_down_raises_the_backend_error() -> None:
    with pytest.raises(BackendConnectionError):
        check(f"http://127.0.0.1:{free_port()}")


def post(base: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=30)


def test_the_fake_knob_checks_the_fields_as_the_patched_schema(fake_binary: Path) -> None:
    args = ("--spec-type", CASCADE, "--fake-per-request-spec")
    with fake_server(fake_binary, *args) as base:
        chat = {"messages": [{"role": "user", "content": "a b c"}], "max_tokens": 8}
        plain = post(base, "/v1/chat/completions", chat).json()["timings"]
        assert plain["draft_n_max"] == 16 and plain["draft_n"] > 0  # absent: as configured
        off = post(base, "/v1/chat/completions", chat | {"speculative.n_max": 0})
        assert off.json()["timings"]["draft_n_max"] == 0 and "draft_n" not in off.json()["timings"]
        none = post(base, "/completion", {"prompt": "a", "speculative.types": []}).json()
        assert none["timings"]["draft_n_max"] == 0
        one = post(base, "/v1/completions", {"prompt": "a", "speculative.types": ["ngram-mod"]})
        assert one.json()["timings"]["draft_n_max"] == 16
        for bad in (
            {"speculative.n_max": 17},
            {"speculative.n_max": -1},
            {"speculative.types": ["draft-simple"]},
            {"speculative.types": "ngram-mod"},
            {"speculative.n_max": 2, "speculative.n_min": 3},
            {"speculative.p_min": 1.5},
        ):
            r = post(base, "/v1/completions", {"prompt": "a"} | bad)
            assert r.status_code == 400, bad
            error = r.json()["error"]
            assert error["type"] == "invalid_request_error" and error["message"].startswith(
                "Field 'speculative."
            )
        assert httpx.get(base + "/props").json()[PER_REQUEST_FLAG] is True
