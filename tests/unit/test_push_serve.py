"""Pushed streams through the real `fronde serve` (uvicorn, httptools) over fake backends.

The in-process tests reach the app through an ASGI transport, where nothing is pushed;
here the stream leaves a real server, so the write from the upstream's reads is the one
under test: the same bytes as the iterated relay, a crashed backend seen in the stream,
a client that leaves freeing the slot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import httpx
import pytest

from fronde.backends.process import free_port
from fronde.runtime.models import load_profile

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"


class Serve:
    """A `fronde serve --mode baseline` child over the fake llama-server."""

    def __init__(
        self, tmp: Path, fake_binary: Path, push: bool, fake_args: list[str], env: dict[str, str]
    ) -> None:
        shutil.copy(REPO_MODELS / "cpu-gemma-270m.toml", tmp)
        target = load_profile(tmp, "cpu-gemma-270m").target
        with (tmp / target.file).open("wb") as f:
            f.truncate(target.size or 1)
        env = (
            os.environ
            | {
                "FRONDE_CACHE_DIR": str(tmp),
                "FRONDE_MODELS_DIR": str(tmp),
                "FRONDE_LLAMA_SERVER": str(fake_binary),
                "FRONDE_PROFILE": "cpu-gemma-270m",
                "FRONDE_LOG_LEVEL": "warning",
                "FRONDE_SERVER__PUSH": "true" if push else "false",
                "FRONDE_BACKEND__EXTRA_ARGS": json.dumps(fake_args),
            }
            | env
        )
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = (tmp / f"serve-{port}.log").open("w")
        cmd = [sys.executable, "-m", "fronde", "serve", "--port", str(port), "--mode", "baseline"]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise AssertionError("fronde serve did not come up in 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


class StartServe(Protocol):
    """Start a :class:`Serve`, stopped at the end of the test."""

    def __call__(
        self,
        push: bool = True,
        fake_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> Serve: ...


@pytest.fixture
def serve(fake_binary: Path, tmp_path: Path) -> Iterator[StartServe]:
    started: list[Serve] = []

    def start(
        push: bool = True, fake_args: list[str] | None = None, env: dict[str, str] | None = None
    ) -> Serve:
        sub = tmp_path / f"s{len(started)}"
        sub.mkdir()
        started.append(Serve(sub, fake_binary, push, fake_args or [], env or {}))
        return started[-1]

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.stop()


def streamed(url: str, path: str, body: dict[str, object]) -> bytes:
    """The raw body of a streamed answer, the parts that differ between servers taken out."""
    with httpx.stream("POST", url + path, json={"model": "x", "stream": True, **body}) as r:
        assert r.status_code == 200
        raw = b"".join(r.iter_raw())
    raw = re.sub(rb'"timings": ?\{[^}]*\}', b"", raw)
    return re.sub(rb'"(id|created|host|system_fingerprint)": ?("[^"]*"|\d+)', b"", raw)


BODIES: list[tuple[str, dict[str, object]]] = [
    ("/v1/completions", {"prompt": "def f(x): return", "max_tokens": 20}),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi there é✓"}],
            "max_tokens": 12,
            "stream_options": {"include_usage": True},
        },
    ),
    ("/v1/completions", {"prompt": ["a b", "c d"], "max_tokens": 5}),
]


def test_a_pushed_stream_is_byte_for_byte_the_iterated_one(serve: StartServe) -> None:
    pushed, iterated = serve(push=True), serve(push=False)
    for path, body in BODIES:
        one = streamed(pushed.url, path, body)
        assert one == streamed(iterated.url, path, body)
        assert one.endswith(b"data: [DONE]\n\n") and one.count(b"[DONE]") == 1
    assert not httpx.get(pushed.url + "/fronde/v1/router").json()["in_flight"]


def test_a_backend_that_dies_mid_stream_ends_it_with_an_error_event(serve: StartServe) -> None:
    s = serve(fake_args=["--fake-crash-after", "3"])
    with httpx.stream(
        "POST",
        s.url + "/v1/chat/completions",
        json={"model": "x", "stream": True, "messages": [{"role": "user", "content": "a b"}]},
        timeout=30,
    ) as r:
        lines = [line for line in r.iter_lines() if line]
    assert any('"content"' in line for line in lines)
    assert '"error"' in lines[-1] and "[DONE]" not in "".join(lines)


def test_a_client_that_leaves_a_pushed_stream_frees_the_slot(serve: StartServe) -> None:
    s = serve(fake_args=["--fake-tps", "20"])

    def processing() -> bool:
        return httpx.get(s.url + "/slots").json()[0]["is_processing"]

    body = {"model": "x", "stream": True, "prompt": "a b c", "max_tokens": 2000}
    with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()  # (breaking out of a for loop would close the stream)
        while not next(lines).startswith("data: {"):
            pass
        assert processing()
    deadline = time.monotonic() + 5
    while processing() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processing()  # at 20 tok/s the 2,000 tokens would take 100 s
    assert not httpx.get(s.url + "/fronde/v1/router").json()["in_flight"]


def test_a_slow_pushed_stream_gets_keep_alive_comments_between_events(serve: StartServe) -> None:
    """Silence is timed from the pushed pieces: comments come in the gaps, and only there."""
    s = serve(fake_args=["--fake-tps", "4"], env={"FRONDE_SERVER__SSE_KEEPALIVE_S": "0.05"})
    body = {"model": "x", "stream": True, "prompt": "a b c", "max_tokens": 4}
    with httpx.stream("POST", s.url + "/v1/completions", json=body, timeout=30) as r:
        lines = list(r.iter_lines())
    assert ": keep-alive" in lines
    assert lines[-2:] == ["data: [DONE]", ""]
    events = [line for line in lines if line.startswith("data: {")]
    assert len(events) == 4 + 1  # four words, the last event with the finish reason
