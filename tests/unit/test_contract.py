"""The drop-in OpenAI contract and fault handling, over fake llama-server backends.

Each test names the behaviour it proves; the fake's knobs (tests/fakes) inject the
faults: kill, hang, garbage, early close, split UTF-8, context overflow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import tomli_w
from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends.pool import BackendPool, PoolPlan
from fronde.backends.process import LaunchSpec, free_port
from fronde.config import load_settings
from fronde.modes import Mode

from ..procs import wait_dead

MODES = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD]

ORIGINAL_ROUTER: dict[str, Any] = {"floor": "baseline", "probe": "always", "predict": False}
"""``router`` settings of the original FRONDE policy, for tests of the probe machinery:
floors start at baseline and every routed request probes a candidate that differs from
the floor (the defaults start at ngram-mod and probe only long, unmeasured requests)."""


def make_client(
    fake_binary: Path,
    tmp_path: Path,
    knobs: dict[Mode, list[str]] | None = None,
    **overrides: Any,
) -> TestClient:
    knobs = knobs or {}
    specs = {
        m: LaunchSpec(
            m,
            fake_binary,
            ["--alias", "fronde", "--spec-type", str(m), *knobs.get(m, [])],
            tmp_path / f"{m}.log",
        )
        for m in MODES
    }
    left_out = {Mode.DRAFT: "profile has no draft model"}
    pool = BackendPool(PoolPlan(specs, left_out), stop_grace_s=1.0)
    settings = load_settings(cache_dir=tmp_path, models_dir=tmp_path, **overrides)
    return TestClient(create_app(settings, pool=pool), raise_server_exceptions=False)


def ready(c: TestClient) -> TestClient:
    for _ in range(400):
        states = {b["state"] for b in c.get("/health").json()["backends"].values()}
        if states <= {"ready", "left-out"}:
            return c
        time.sleep(0.05)
    raise AssertionError(f"never healthy: {c.get('/health').json()}")


def chat(content: str = "alpha beta gamma", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 6, **extra}


def sse_events(
    c: TestClient, body: dict[str, Any], path: str = "/v1/chat/completions"
) -> list[str]:
    """The ``data:`` payloads of a streamed answer, in order (comments dropped)."""
    with c.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        return [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]


# --- errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat(n=2), "n"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(max_tokens="ten"), "max_tokens"),
        (chat(temperature=99), "temperature"),
        (chat(stop=[1, 2]), "stop"),
        (chat(tools="all"), "tools"),
        (chat(logprobs="yes"), "logprobs"),
    ],
)
def test_ill_formed_fields_are_400_naming_the_field(
    plain: TestClient, body: dict[str, Any], param: str
) -> None:
    r = plain.post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["param"]) == ("invalid_request_error", param)


def test_n_equal_to_one_is_fine(plain: TestClient) -> None:
    assert plain.post("/v1/chat/completions", json=chat(n=1)).status_code == 200


def test_fastapi_404_and_405_are_openai_shaped(plain: TestClient) -> None:
    for r, status in ((plain.get("/v1/nothing"), 404), (plain.get("/v1/chat/completions"), 405)):
        assert r.status_code == status
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_a_body_over_the_limit_is_413(serve: Any) -> None:
    c = serve(server={"max_body_bytes": 2048})
    r = c.post("/v1/chat/completions", json=chat("x" * 4000))
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    assert c.post("/v1/chat/completions", json=chat()).status_code == 200


def test_a_prompt_over_the_context_is_400_context_length_exceeded(serve: Any) -> None:
    c = serve({m: ["--fake-ctx", "5"] for m in MODES}, router=ORIGINAL_ROUTER)
    words = "one two three four five six seven"
    r = c.post("/v1/chat/completions", json=chat(words, model="fronde:ngram-simple"))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "context_length_exceeded"
    assert "7 tokens" in err["message"] and "holds 5" in err["message"]
    # Routed (a probe on token ids through native /completion): the same error.
    r = c.post("/v1/chat/completions", json=chat(words))
    assert r.headers["x-fronde-class"] == "probe"
    assert (r.status_code, r.json()["error"]["code"]) == (400, "context_length_exceeded")
    assert r.json()["error"]["param"] == "messages"
    r = c.post("/v1/completions", json={"prompt": words, "max_tokens": 4})
    assert (r.status_code, r.json()["error"]["param"]) == (400, "prompt")


def test_a_backend_side_400_keeps_its_status(plain: TestClient) -> None:
    r = plain.post("/v1/chat/completions", json=chat(fake_backend_error=True))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "backend_rejected_request"


def test_max_tokens_is_never_unbounded(serve: Any) -> None:
    c = serve(server={"default_max_tokens": 3})
    body = {"messages": [{"role": "user", "content": "a b c d e f g"}]}
    r = c.post("/v1/chat/completions", json=body)
    assert r.json()["usage"]["completion_tokens"] == 3
    # max_completion_tokens is honoured too, and wins over max_tokens.
    r = c.post("/v1/chat/completions", json={**body, "max_completion_tokens": 5, "max_tokens": 2})
    assert r.json()["usage"]["completion_tokens"] == 5


# --- streaming ----------------------------------------------------------------------


def test_stream_has_one_done_and_usage_only_when_asked(serve: Any) -> None:
    c = serve({m: ["--fake-always-usage"] for m in MODES})
    for forced in ("fronde:baseline", "fronde:ngram-mod"):
        events = sse_events(c, chat(model=forced))
        assert events.count("[DONE]") == 1 and events[-1] == "[DONE]"
        assert not any('"usage"' in e for e in events)  # the build sent one; dropped
        events = sse_events(c, chat(model=forced, stream_options={"include_usage": True}))
        usage = [json.loads(e) for e in events[:-1] if '"usage"' in e]
        assert len(usage) == 1 and usage[0]["choices"] == []
        assert usage[0]["usage"]["completion_tokens"] == 6
        assert json.loads(events[-2]) == usage[0] and events[-1] == "[DONE]"  # usage is last


def test_include_usage_is_made_from_timings_when_the_build_sends_none(plain: TestClient) -> None:
    # The fake (like b11434) sends a usage chunk when asked; the probe path builds its own.
    events = sse_events(plain, chat(stream_options={"include_usage": True}))
    usage = [json.loads(e) for e in events if '"usage"' in e]
    assert len(usage) == 1 and usage[0]["choices"] == []
    assert usage[0]["usage"]["completion_tokens"] == 6


def test_multibyte_characters_split_across_reads_are_never_mangled(serve: Any) -> None:
    c = serve({m: ["--fake-split-utf8"] for m in MODES})
    words = "été Ærø 東京 🚀🌍 naïve"
    events = sse_events(c, chat(words, model="fronde:baseline", max_tokens=5))
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1])
    assert "\ufffd" not in text
    assert text.split() == words.split()


def test_keepalive_comments_flow_while_the_backend_is_silent(serve: Any) -> None:
    c = serve({m: ["--fake-tps", "8"] for m in MODES}, server={"sse_keepalive_s": 0.05})
    with c.stream(
        "POST", "/v1/chat/completions", json={**chat(model="fronde:baseline"), "stream": True}
    ) as r:
        lines = list(r.iter_lines())
    assert ": keep-alive" in lines
    assert lines.count("data: [DONE]") == 1


def test_sampling_fields_reach_the_backend_and_client_headers_do_not(plain: TestClient) -> None:
    fields: dict[str, Any] = {
        "stop": ["\n\n", "END"],
        "seed": 1234,
        "temperature": 0.3,
        "top_p": 0.9,
        "response_format": {"type": "json_object"},
        "tool_choice": "auto",
        "max_completion_tokens": 5,
    }
    headers = {
        "authorization": "Bearer client-secret",
        "connection": "keep-alive, x-hop",
        "x-hop": "1",
        "cookie": "a=b",
    }
    r = plain.post(
        "/v1/chat/completions", json=chat(model="fronde:ngram-mod", **fields), headers=headers
    )
    got = r.json()["fake_received"]
    for name, value in fields.items():
        if name != "stop":
            assert got["body"][name] == value, name
    # Stop strings are applied by Fronde over the stream it asks for (fronde.request.relay).
    assert "stop" not in got["body"] and got["body"]["stream"] is True
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    sent = {k.lower() for k in got["headers"]}
    assert not sent & {"authorization", "cookie", "x-hop", "x-fronde-mode"}


def test_tool_call_deltas_and_stop_reach_the_client_intact(plain: TestClient) -> None:
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=plain)
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    msgs: list[Any] = [{"role": "user", "content": "weather in Paris?"}]
    r = client.chat.completions.create(
        model="fronde:baseline", messages=msgs, tools=tools, tool_choice="required"
    )
    call = r.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert (call.function.name, json.loads(call.function.arguments)) == (  # type: ignore[union-attr]
        "get_weather",
        {"city": "Paris"},
    )
    assert r.choices[0].finish_reason == "tool_calls"
    stream = client.chat.completions.create(
        model="fronde:baseline", messages=msgs, tools=tools, tool_choice="required", stream=True
    )
    args = ""
    for ch in stream:
        for d in ch.choices[0].delta.tool_calls or []:
            args += (d.function.arguments or "") if d.function else ""
    assert json.loads(args) == {"city": "Paris"}


# --- faults ----------------------------------------------------------------------------


@pytest.mark.parametrize("knob", [["--fake-garbage"], ["--fake-early-close", "2"]])
def test_garbage_or_early_close_is_an_in_band_error_never_done(serve: Any, knob: list[str]) -> None:
    c = serve({Mode.NGRAM_SIMPLE: knob})
    events = sse_events(c, chat(model="fronde:ngram-simple"))
    assert "[DONE]" not in events
    assert json.loads(events[-1])["error"]["type"] == "server_error"
    assert not any('"finish_reason": "stop"' in e for e in events)


def test_a_hanging_backend_times_out_as_504(serve: Any) -> None:
    c = serve({Mode.NGRAM_SIMPLE: ["--fake-hang"]}, upstream={"read_timeout_s": 0.5})
    t0 = time.monotonic()
    r = c.post("/v1/chat/completions", json=chat(model="fronde:ngram-simple"))
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "backend_timeout"
    assert time.monotonic() - t0 < 5


def test_failure_before_the_first_byte_is_retried_on_another_mode(serve: Any) -> None:
    c = serve({Mode.NGRAM_MOD: ["--fake-crash-after", "0"]})
    block = "```python\n" + "def f(x):\n    return x + 1\n" * 40 + "```"
    r = c.post("/v1/chat/completions", json=chat(f"Refactor this:\n{block}"))
    assert r.status_code == 200
    assert r.headers["x-fronde-class"] == "edit"
    assert r.headers["x-fronde-retried-from"] == "ngram-mod"
    assert r.headers["x-fronde-mode"] != "ngram-mod"
    # A forced mode is not moved: the client asked for that backend.
    time.sleep(0.2)
    r = c.post("/v1/chat/completions", json=chat(model="fronde:ngram-mod"))
    assert r.status_code in (502, 503)


def test_a_probe_cut_mid_body_is_a_backend_failure_not_a_500(serve: Any) -> None:
    # ngram-mod dies after 2 streamed tokens of the probe's native /completion: the
    # body is cut mid-way. The fuzz test found this answered 500 "internal error".
    c = serve({Mode.NGRAM_MOD: ["--fake-crash-after", "2"]})
    r = c.post("/v1/completions", json={"prompt": "alpha beta gamma", "max_tokens": 8})
    assert r.status_code != 500, r.text
    if r.status_code == 200:
        assert r.headers["x-fronde-retried-from"] == "ngram-mod"
    else:
        assert r.status_code in (502, 503)
        assert r.json()["error"]["code"] != "internal_error"


def test_32_concurrent_streams_get_their_own_content(serve: Any) -> None:
    c = serve(router={"max_parallel_decodes": 4})

    def one(i: int) -> str:
        events = sse_events(c, chat(f"w{i}a w{i}b", model="fronde:baseline", max_tokens=4))
        assert events[-1] == "[DONE]"
        return "".join(
            json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1]
        )

    with ThreadPoolExecutor(32) as pool:
        texts = list(pool.map(one, range(32)))
    for i, text in enumerate(texts):
        assert text.split() == [f"w{i}a", f"w{i}b", f"w{i}a", f"w{i}b"]


# --- security, passthrough, metrics ----------------------------------------------------


def test_api_keys_guard_everything_but_health(serve: Any) -> None:
    c = serve(server={"api_keys": ["s3cret"]})
    r = c.post("/v1/chat/completions", json=chat())
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    bad = {"authorization": "Bearer nope"}
    assert c.post("/v1/chat/completions", json=chat(), headers=bad).status_code == 401
    good = {"authorization": "Bearer s3cret"}
    assert c.post("/v1/chat/completions", json=chat(), headers=good).status_code == 200
    assert c.get("/v1/models").status_code == 401
    assert c.get("/health").status_code == 200


def test_cors_is_off_by_default_and_configurable(plain: TestClient, serve: Any) -> None:
    pre = {"origin": "http://app.example", "access-control-request-method": "POST"}
    assert (
        "access-control-allow-origin"
        not in plain.options("/v1/chat/completions", headers=pre).headers
    )
    c = serve(server={"cors_origins": ["http://app.example"]})
    r = c.options("/v1/chat/completions", headers=pre)
    assert r.headers["access-control-allow-origin"] == "http://app.example"


def test_native_endpoints_reach_the_chosen_backend(plain: TestClient) -> None:
    r = plain.get("/props", headers={"x-fronde-mode": "ngram-mod"})
    assert (r.headers["x-fronde-mode"], r.json()["spec_type"]) == ("ngram-mod", "ngram-mod")
    assert plain.get("/props").json()["spec_type"] == "baseline"  # baseline by default
    toks = plain.post("/tokenize", json={"content": "hi"}).json()["tokens"]
    assert plain.post("/detokenize", json={"tokens": toks}).json()["content"]
    r = plain.post("/completion", json={"prompt": [5, 6], "n_predict": 3, "stream": True})
    events = [ln for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert json.loads(events[-1][6:])["stop"] is True
    assert plain.get("/slots", params={"mode": "turbo"}).status_code == 400


def test_metrics_count_requests_and_generations(plain: TestClient) -> None:
    plain.post("/v1/chat/completions", json=chat(model="fronde:ngram-mod"))
    text = plain.get("/metrics").text
    assert 'fronde_backend_up{mode="ngram-mod"} 1.0' in text
    assert 'fronde_generated_tokens_total{mode="ngram-mod"}' in text
    assert 'path="/v1/chat/completions"' in text and 'route="forced"' in text
    assert "fronde_decode_tokens_per_second_bucket" in text


# --- a real `fronde serve` process (real sockets: disconnects, signals) ------------------


@contextlib.contextmanager
def real_serve(tmp_path: Path, fake_binary: Path, **settings: Any) -> Generator[RealServe]:
    """Run `fronde serve` as a user does, over fake backends, until the block ends."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "models" / "cpu-gemma-270m.toml", models)
    with (models / "gemma-3-270m-q4_k_m.gguf").open("wb") as f:
        f.truncate(253_113_024)  # sparse stand-in of the manifest's size
    cfg = tmp_path / "fronde.toml"
    base_settings: dict[str, Any] = {
        "llama_server": str(fake_binary),
        "models_dir": str(models),
        "cache_dir": str(tmp_path / "cache"),
        "modes": ["baseline", "ngram-mod"],
        "profile": "cpu-gemma-270m",
    }
    cfg.write_text(tomli_w.dumps(base_settings | settings))
    # With swap residency the modes that are not resident wait stopped.
    settled: set[str] = {"ready", "left-out"}
    if settings.get("residency") == "swap":
        settled.add("stopped")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "fronde", "serve", "--config", str(cfg), "--port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.TransportError):
                r = httpx.get(f"{base}/health", timeout=2)
                states = {b["state"] for b in r.json()["backends"].values()}
                if r.status_code == 200 and states <= settled:
                    yield RealServe(proc, base, r.json())
                    return
            time.sleep(0.1)
        raise AssertionError(log_path.read_text()[-2000:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@dataclasses.dataclass
class RealServe:
    proc: subprocess.Popen[bytes]
    base: str
    health: dict[str, Any]


def test_client_disconnect_frees_the_backend_slot_within_a_second(
    tmp_path: Path, fake_binary: Path
) -> None:
    slow = {"backend": {"extra_args": ["--fake-tps", "20"]}}
    with real_serve(tmp_path, fake_binary, **slow) as s:
        body = {**chat("a b c", model="fronde:ngram-mod", max_tokens=400), "stream": True}
        slots = f"{s.base}/slots"
        with httpx.stream("POST", f"{s.base}/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()  # (breaking out of a for loop would close the stream)
            while not next(lines).startswith("data: {"):
                pass
            busy = httpx.get(slots, headers={"x-fronde-mode": "ngram-mod"}).json()
            assert busy[0]["is_processing"] is True
        left = time.monotonic()
        while time.monotonic() - left < 1.0:
            if not httpx.get(slots, params={"mode": "ngram-mod"}).json()[0]["is_processing"]:
                return
            time.sleep(0.02)
        raise AssertionError("the slot was still processing 1 s after the client left")


def test_sigterm_drains_in_flight_streams_then_stops_every_child(
    tmp_path: Path, fake_binary: Path
) -> None:
    settings = {"backend": {"extra_args": ["--fake-tps", "20"]}, "server": {"drain_s": 20.0}}
    with real_serve(tmp_path, fake_binary, **settings) as s:
        children = [b["pid"] for b in s.health["backends"].values() if b.get("pid")]
        assert len(children) == 2
        lines: list[str] = []
        started = threading.Event()

        def stream() -> None:
            body = {"prompt": "a b", "max_tokens": 30, "stream": True, "model": "fronde:baseline"}
            with httpx.stream("POST", f"{s.base}/v1/completions", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    lines.append(line)
                    started.set()

        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(10)
        s.proc.send_signal(signal.SIGTERM)
        t.join(30)
        # The answer in flight finished (30 tokens at 20 tok/s: 1.5 s), then Fronde stopped.
        assert "data: [DONE]" in lines
        # uvicorn re-raises the signal once shut down, so the status is "killed by SIGTERM".
        assert s.proc.wait(30) in (0, -signal.SIGTERM)
        assert wait_dead(children, 10) == []
