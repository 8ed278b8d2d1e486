"""Probe-and-continue end to end over fake backends with known speeds.

The fake's native /completion continues a deterministic token chain, so a
generation spliced across backends must equal one uninterrupted run. These tests are
about the probe machinery, so they run the original FRONDE policy (floors start at
baseline, every candidate is probed: :data:`~.test_contract.ORIGINAL_ROUTER`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fronde.modes import Mode

from ..fakes.fake_llama_server import next_token, piece, tokenize
from .test_api import serve, wait_healthy
from .test_contract import ORIGINAL_ROUTER


def chain(prompt_text: str, n: int) -> tuple[list[int], str]:
    """What an uninterrupted greedy run generates: (tokens, text)."""
    last, toks = tokenize(prompt_text)[-1], list[int]()
    for _ in range(n):
        last = next_token(last)
        toks.append(last)
    return toks, "".join(piece(t) for t in toks)


def speeds_serve(fake_binary: Path, tmp_path: Path, mod_tps: int) -> Iterator[TestClient]:
    """Fronde over fakes where ngram-mod decodes at ``mod_tps`` and baseline at 200 tok/s."""
    knobs = {Mode.NGRAM_MOD: ["--fake-tps", str(mod_tps)], Mode.BASELINE: ["--fake-tps", "200"]}
    with serve(fake_binary, tmp_path, knobs, router=ORIGINAL_ROUTER) as c:
        wait_healthy(c)
        yield c


def rendered(content: str) -> str:
    return f"<user>{content}</user><model>"  # the fake's chat template


@pytest.fixture
def fast_mod(fake_binary: Path, tmp_path: Path) -> Iterator[TestClient]:
    """ngram-mod decodes 4× faster than baseline: the probe must win."""
    yield from speeds_serve(fake_binary, tmp_path, 800)


@pytest.fixture
def slow_mod(fake_binary: Path, tmp_path: Path) -> Iterator[TestClient]:
    """ngram-mod decodes at 1.05× baseline: below the 1.10 margin, the floor continues."""
    yield from speeds_serve(fake_binary, tmp_path, 210)


def ask(c: TestClient, content: str, max_tokens: int = 120, **extra: object) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    out["_headers"] = dict(r.headers)
    return out


def test_first_probe_wins_and_the_answer_is_seamless(fast_mod: TestClient) -> None:
    r = ask(fast_mod, "alpha")
    h = r["_headers"]
    assert (h["x-fronde-class"], h["x-fronde-mode"], h["x-fronde-probe-tok-s"]) == (
        "probe",
        "ngram-mod",
        "800.00",
    )
    fronde = r["fronde"]
    # ngram-mod probes tokens 1-48, baseline (no EMA yet) probes 49-96, ngram-mod continues.
    assert [(s["mode"], s["tokens"]) for s in fronde["segments"]] == [
        ("ngram-mod", 48),
        ("baseline", 48),
        ("ngram-mod", 24),
    ]
    _, text = chain(rendered("alpha"), 120)
    assert r["choices"][0]["message"]["content"] == text
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 120  # each token once
    assert r["usage"]["prompt_tokens"] == len(tokenize(rendered("alpha")))


def test_probe_below_the_margin_hands_over_to_the_floor(slow_mod: TestClient) -> None:
    r = ask(slow_mod, "beta")
    fronde = r["fronde"]
    assert fronde["mode"] == "baseline"
    assert [s["mode"] for s in fronde["segments"]] == ["ngram-mod", "baseline", "baseline"]
    assert r["choices"][0]["message"]["content"] == chain(rendered("beta"), 120)[1]
    # The router's row describes the whole answer, not its last segment.
    row = slow_mod.get("/fronde/v1/router").json()["recent"][-1]
    assert row["tokens"] == 120
    assert row["alpha"] is not None  # the ngram-mod segment drafted


@pytest.fixture
def losing_mod(fake_binary: Path, tmp_path: Path) -> Iterator[TestClient]:
    """ngram-mod decodes slower than baseline: it can never become the floor."""
    yield from speeds_serve(fake_binary, tmp_path, 150)


def test_known_floor_means_no_floor_probe_and_repeat_hits_the_cache(
    losing_mod: TestClient,
) -> None:
    # Each probe's floor segment and continuation measure baseline; three samples make
    # its speed trusted (one noisy sample must never set a floor): two requests.
    ask(losing_mod, "first")
    ask(losing_mod, "first again")
    r = ask(losing_mod, "second")
    fronde = r["fronde"]
    assert [(s["mode"], s["tokens"]) for s in fronde["segments"]] == [
        ("ngram-mod", 48),
        ("baseline", 72),
    ]
    again = ask(losing_mod, "second")
    h = again["_headers"]
    assert (h["x-fronde-class"], h["x-fronde-mode"]) == ("cache", "baseline")
    state = losing_mod.get("/fronde/v1/router").json()
    assert state["cache"]["entries"] == 3
    assert state["modes"]["ngram-mod"]["decode_tok_s_ema"] == pytest.approx(150.0)
    assert state["modes"]["baseline"]["decode_tok_s_ema"] == pytest.approx(200.0)
    assert state["modes"]["ngram-mod"]["alpha_ema"] == pytest.approx(0.5)


def test_an_aggressive_mode_that_became_the_floor_serves_without_probe(
    fast_mod: TestClient,
) -> None:
    # ngram-mod measured 4× baseline, each with three trusted samples: it is now the floor.
    for i in range(3):
        ask(fast_mod, f"first {i}")
    r = fast_mod.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "second"}], "max_tokens": 30},
    )
    assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == ("fallback", "ngram-mod")


def test_stop_inside_the_probe_window_ends_the_answer(fake_binary: Path, tmp_path: Path) -> None:
    toks, _ = chain(rendered("gamma"), 10)
    knobs = {m: ["--fake-eos-token", str(toks[9])] for m in Mode}
    with serve(fake_binary, tmp_path, knobs, router=ORIGINAL_ROUTER) as c:
        wait_healthy(c)
        r = ask(c, "gamma")
    fronde = r["fronde"]
    assert [(s["mode"], s["tokens"]) for s in fronde["segments"]] == [("ngram-mod", 9)]
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["completion_tokens"] == 9


def test_a_short_budget_is_all_probe(fast_mod: TestClient) -> None:
    r = ask(fast_mod, "delta", max_tokens=20)
    fronde = r["fronde"]
    assert [(s["mode"], s["tokens"]) for s in fronde["segments"]] == [("ngram-mod", 20)]
    assert r["usage"]["completion_tokens"] == 20


def test_streamed_probe_is_one_seamless_stream(fast_mod: TestClient) -> None:
    body = {
        "messages": [{"role": "user", "content": "epsilon"}],
        "max_tokens": 100,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with fast_mod.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["x-fronde-class"] == "probe"
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and lines.count("data: [DONE]") == 1
    events = [json.loads(ln[6:]) for ln in lines[:-1]]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == chain(rendered("epsilon"), 100)[1]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    finals = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 100


def test_text_completion_probe(fast_mod: TestClient) -> None:
    r = fast_mod.post("/v1/completions", json={"prompt": "zeta", "max_tokens": 60})
    assert r.status_code == 200 and r.headers["x-fronde-class"] == "probe"
    assert r.json()["choices"][0]["text"] == chain("zeta", 60)[1]
    assert r.json()["object"] == "text_completion"


def test_edit_and_unsafe_classes_skip_the_probe(fast_mod: TestClient) -> None:
    block = "```python\n" + "def f(x):\n    return x + 1\n" * 40 + "```"
    r = fast_mod.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": f"Fix the bug.\n{block}"}], "max_tokens": 8},
    )
    assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == ("edit", "ngram-mod")
    r = fast_mod.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "logprobs": True},
    )
    assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == (
        "unsafe-for-spec",
        "baseline",
    )
