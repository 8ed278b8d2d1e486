"""End to end on real parts: `fronde serve`, llama-server b11434, gemma-3-270m.

Driven with the official `openai` SDK, as agent tools drive Fronde.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import tomli_w
from openai import OpenAI
from openai.types.chat import ChatCompletionMessageParam

from fronde.backends.client import BackendClient
from fronde.backends.process import free_port
from fronde.config import load_settings
from fronde.json_types import JSONObject
from fronde.modes import Mode
from fronde.request.segment import Segment, prompt_ids, segment_stream
from fronde.runtime.models import load_profile

from ..procs import alive, wait_dead
from .conftest import ORIGINAL_POLICY, Serve, require_real_parts, start_serve

pytestmark = pytest.mark.integration

MODES = ["baseline", "ngram-simple", "ngram-mod", "cascade"]
ASK: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "List three colours of the rainbow."}
]
# Completion-style text that a base model continues by copying: n-gram drafts pay off.
COPY_PROMPT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n" * 3


def client(serve: Serve) -> OpenAI:
    return OpenAI(base_url=f"{serve.base_url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_lists_the_gemma_modes(real_serve: Serve) -> None:
    models = client(real_serve).models.list()
    assert [m.id for m in models.data] == ["fronde"] + [f"fronde:{m}" for m in MODES]
    health = real_serve.health()
    assert health["backends"]["draft"]["state"] == "left-out"


def test_one_ready_line_names_the_base_url_the_live_page_and_the_modes_up(
    real_serve: Serve,
) -> None:
    deadline = time.monotonic() + 10  # printed just after /health turned all-ready
    lines: list[str] = []
    while not lines and time.monotonic() < deadline:
        text = real_serve.log.read_text()
        lines = [x for x in text.splitlines() if x.startswith("Fronde is ready")]
        time.sleep(0.1)
    url = real_serve.base_url
    assert lines == [
        f"Fronde is ready · OpenAI base URL {url}/v1 · live page {url}/ui · "
        f"modes up: {', '.join(MODES)}"
    ]
    assert client(real_serve).models.list().data  # the base URL is the one to give


@pytest.mark.parametrize("mode", MODES)
def test_chat_in_each_mode_returns_real_text(real_serve: Serve, mode: str) -> None:
    raw = client(real_serve).chat.completions.with_raw_response.create(
        model=f"fronde:{mode}",
        messages=ASK,
        max_tokens=24,
        temperature=0,
    )
    assert raw.headers["x-fronde-mode"] == mode
    assert raw.headers["x-fronde-class"] == "forced"
    completion = raw.parse()
    assert completion.model == "fronde"  # public name, not the GGUF path
    text = completion.choices[0].message.content or ""
    assert len(text.strip()) > 0
    assert completion.usage is not None and 0 < completion.usage.completion_tokens <= 24
    assert completion.usage.prompt_tokens > 10  # the gemma turn template was applied


@pytest.mark.parametrize("mode", MODES)
def test_streamed_chat_in_each_mode(real_serve: Serve, mode: str) -> None:
    stream = client(real_serve).chat.completions.create(
        model=f"fronde:{mode}",
        messages=ASK,
        max_tokens=24,
        temperature=0,
        stream=True,
    )
    pieces: list[str] = []
    finish: list[str] = []
    for chunk in stream:
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    assert len("".join(pieces).strip()) > 0
    assert len(pieces) > 3  # it really streamed, chunk by chunk
    assert finish and finish[-1] in {"length", "stop"}


def test_novel_prompt_is_probed_then_cached(tmp_path: Path) -> None:
    """With the original policy (floor baseline, probe always), a novel prompt is probed;
    the same prompt is then cached."""
    real_serve = start_serve(tmp_path, env=ORIGINAL_POLICY)
    try:
        check_probe_then_cache(real_serve)
    finally:
        real_serve.stop()


def check_probe_then_cache(real_serve: Serve) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Count from one to twenty in words, one per line."}
    ]
    first = client(real_serve).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, max_tokens=64, temperature=0
    )
    assert first.headers["x-fronde-class"] == "probe"
    assert float(first.headers["x-fronde-probe-tok-s"]) > 0
    body = first.parse()
    assert body.usage is not None and body.usage.completion_tokens <= 64
    assert body.choices[0].message.content
    again = client(real_serve).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, max_tokens=64, temperature=0
    )
    assert again.headers["x-fronde-class"] == "cache"
    assert again.headers["x-fronde-mode"] == first.headers["x-fronde-mode"]
    state = httpx.get(f"{real_serve.base_url}/fronde/v1/router", timeout=10).json()
    assert state["cache"]["entries"] >= 1
    assert state["modes"]  # EMAs were recorded


def test_edit_prompt_goes_to_ngram_mod(real_serve: Serve) -> None:
    code = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n" * 12
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": f"Rename add to plus.\n```python\n{code}```"}
    ]
    raw = client(real_serve).chat.completions.with_raw_response.create(
        model="fronde", messages=messages, max_tokens=16, temperature=0
    )
    assert (raw.headers["x-fronde-class"], raw.headers["x-fronde-mode"]) == ("edit", "ngram-mod")


@pytest.mark.parametrize("mode", MODES)
def test_probe_plus_continuation_equals_a_plain_run(real_serve: Serve, mode: str) -> None:
    """Split a greedy generation at 48 tokens on one backend: the same tokens come out.

    ngram-mod keeps its n-gram pool across requests, and the drafts it makes decide
    the verify batches, whose CPU numerics can flip a near-tie argmax: measured
    here, a cold pool gave token 753 at position 11 where a warm one gives 900. So
    the pool is warmed with the same request first, as the probe's own request
    warms it in real use.
    """
    url = real_serve.health()["backends"][mode]["url"]

    async def run() -> tuple[list[int], list[int]]:
        async with httpx.AsyncClient(timeout=120) as http:
            c = BackendClient(http)
            ids = await prompt_ids(c, url, "text", {"prompt": COPY_PROMPT})
            params: JSONObject = {"temperature": 0, "seed": 42}

            async def gen(prompt: list[int], n: int) -> list[int]:
                seg = Segment(Mode(mode))
                async for _ in segment_stream(c, url, seg, prompt, params, n):
                    pass
                return seg.tokens

            await gen(ids, 96)  # warm-up (ngram-mod's pool)
            plain = await gen(ids, 96)
            head = await gen(ids, 48)
            tail = await gen(ids + head, 48)
            return plain, head + tail

    plain, spliced = asyncio.run(run())
    assert len(plain) == 96
    assert spliced == plain


def timings(serve: Serve, mode: str) -> dict[str, Any]:
    r = httpx.post(
        f"{serve.base_url}/v1/completions",
        json={"prompt": COPY_PROMPT, "max_tokens": 64, "temperature": 0, "model": f"fronde:{mode}"},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    t: dict[str, Any] = r.json()["timings"]
    return t


def test_speculation_runs_only_in_the_speculative_modes(real_serve: Serve) -> None:
    assert "draft_n" not in timings(real_serve, "baseline")
    for mode in ("ngram-simple", "ngram-mod"):
        t = timings(real_serve, mode)
        assert t.get("draft_n", 0) > 0, f"{mode} drafted nothing: {t}"
        assert 0 <= t["draft_n_accepted"] <= t["draft_n"]


def test_crashed_backend_is_restarted_and_serves_again(own_serve: Serve) -> None:
    before = own_serve.health()["backends"]["baseline"]
    os.kill(before["pid"], signal.SIGKILL)
    after = own_serve.wait_all_ready(60)["backends"]["baseline"]
    assert after["pid"] != before["pid"]
    assert after["restarts"] == 1
    r = client(own_serve).chat.completions.create(
        model="fronde:baseline", messages=ASK, max_tokens=8
    )
    assert r.choices[0].message.content


def test_sigterm_leaves_no_llama_server(own_serve: Serve) -> None:
    pids = own_serve.backend_pids()
    assert len(pids) == 2 and all(alive(p) for p in pids)
    # uvicorn re-raises the captured SIGTERM after its graceful shutdown.
    assert own_serve.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    assert wait_dead(pids, timeout_s=1.0) == []  # stopped by Fronde, not by PDEATHSIG
    assert '"event": "pool.stopped"' in own_serve.log.read_text()


def test_sigkill_of_fronde_still_leaves_no_llama_server(own_serve: Serve) -> None:
    pids = own_serve.backend_pids()
    own_serve.stop(signal.SIGKILL)
    assert wait_dead(pids) == []  # PR_SET_PDEATHSIG takes them down


def test_health_reports_loading_then_ready() -> None:
    require_real_parts()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fronde", "serve", "--port", str(port), "--mode", "ngram-simple"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        codes: list[int] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                codes.append(httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code)
            if codes and codes[-1] == 200:
                break
            time.sleep(0.05)
        assert codes[-1] == 200
        assert 503 in codes  # the proxy answered while the backend was loading
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_draft_mode_runs_with_the_target_as_its_own_draft(tmp_path: Path) -> None:
    """The draft code path on real parts. gemma has no smaller draft sharing its
    vocabulary, so the target drafts for itself: slower than baseline, and only a
    test of the plumbing (``-md``, draft-simple), never a speed claim."""
    require_real_parts()
    settings = load_settings()
    profile = load_profile(settings.models_dir, settings.profile)
    gguf = settings.models_dir / profile.target.file
    (tmp_path / gguf.name).symlink_to(gguf)
    target = profile.target.model_dump(mode="json")
    manifest = {
        "name": "draft-selftest",
        "chat_template": profile.chat_template,
        "models": [target, {**target, "role": "draft", "name": "self-draft"}],
    }
    (tmp_path / "draft-selftest.toml").write_text(
        tomli_w.dumps({k: v for k, v in manifest.items() if v is not None})
    )
    serve = start_serve(
        tmp_path,
        *("--profile", "draft-selftest", "--mode", "draft"),
        env={"FRONDE_MODELS_DIR": str(tmp_path)},
    )
    try:
        t = timings(serve, "draft")
        assert t.get("draft_n", 0) > 0, t
        assert 0 <= t["draft_n_accepted"] <= t["draft_n"]
    finally:
        serve.stop()
