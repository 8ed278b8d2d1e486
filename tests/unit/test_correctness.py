"""Issue 17 over fake backends: the same text on every route, 4xx for client mistakes,
correctness rules that no speed rule overrides, and a client that leaves frees its slot.

The fakes follow llama-server's stop rule (tests/fakes: a partial match is held back and a
stream drops it at the budget). What only the real llama-server can show (assistant prefill,
the gemma template, tool_choice against a real chat template) is in
tests/integration/test_correctness_real.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends.pool import BackendPool, PoolPlan
from fronde.backends.process import LaunchSpec
from fronde.config import load_settings
from fronde.modes import Mode

from .test_contract import MODES, ORIGINAL_ROUTER, chat, real_serve, sse_events

WORDS = "alpha beta gamma"


def both(c: TestClient, body: dict[str, Any], path: str = "/v1/chat/completions") -> list[Any]:
    """(text, finish_reason) non-streamed, then streamed."""
    r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    choice: dict[str, Any] = r.json()["choices"][0]
    whole = (choice["message"]["content"] if "message" in choice else choice["text"], None)
    whole = (whole[0], choice["finish_reason"])
    text, finish = "", None
    for e in sse_events(c, body, path):
        if e == "[DONE]":
            continue
        ch: dict[str, Any]
        for ch in json.loads(e)["choices"]:
            delta: dict[str, Any] = ch.get("delta") or {}
            text += str(delta.get("content") or ch.get("text") or "")
            finish = ch.get("finish_reason") or finish
    return [whole, (text, finish)]


# --- stop strings on relayed streams (case 5) ----------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        # "gamma " is the start of the stop string when the budget ends: held back by
        # llama-server, dropped by its stream; the streamed text must keep it too.
        (["gamma x"], ("alpha beta gamma ", "length")),
        (["beta g"], ("alpha ", "stop")),  # a full match inside one chunk
        (["ha be"], ("alp", "stop")),  # a match across two chunks
        ("gamma", ("alpha beta ", "stop")),  # a string, not a list
    ],
)
def test_streamed_text_equals_non_streamed_text_with_stop_strings(
    serve: Any, path: str, stop: Any, expected: tuple[str, str]
) -> None:
    c = serve()
    body: dict[str, Any] = {"max_tokens": 3, "stop": stop, "model": "fronde:baseline"}
    body |= {"messages": [{"role": "user", "content": WORDS}]} if "chat" in path else {}
    body |= {} if "chat" in path else {"prompt": WORDS}
    assert both(c, body, path) == [expected, expected]


def test_a_stream_cut_by_fronde_still_ends_with_usage_and_done(serve: Any) -> None:
    c = serve()
    body = chat(WORDS, model="fronde:ngram-mod", max_tokens=9, stop=["beta g"])
    events = sse_events(c, {**body, "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    usage = json.loads(events[-2])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] >= 2


# --- correctness rules over speed rules (case 6) ------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
]
UNSAFE_BODIES = [
    chat(WORDS, tools=TOOLS),  # the fake's chat template takes tools
    chat(WORDS, logprobs=True),
    chat(WORDS, top_logprobs=2),
]
STRUCTURED_BODIES = [
    chat(WORDS, response_format={"type": "json_object"}),
    chat(WORDS, response_format={"type": "json_schema", "json_schema": {"schema": {}}}),
    chat(WORDS, grammar='root ::= "a"+'),
]
"""Cleared by the structured-output matrix (results/structured-*): routed like any other."""


def test_structured_requests_are_routed_unless_turned_off(serve: Any) -> None:
    c: TestClient = serve()
    for body in STRUCTURED_BODIES:
        r = c.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.headers["x-fronde-class"] != "unsafe-for-spec", body
    off: TestClient = serve(router={"speculate_structured": False})
    for body in STRUCTURED_BODIES:
        r = off.post("/v1/chat/completions", json=body)
        assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == (
            "unsafe-for-spec",
            "baseline",
        )


def test_tools_are_plain_chat_where_the_template_ignores_them(serve: Any) -> None:
    c: TestClient = serve({m: ["--fake-no-tool-template"] for m in Mode})
    r = c.post("/v1/chat/completions", json=chat(WORDS, tools=TOOLS))
    assert r.status_code == 200, r.text
    assert r.headers["x-fronde-class"] != "unsafe-for-spec"
    r = c.post("/v1/chat/completions", json=chat(WORDS, tools=TOOLS, logprobs=True))
    assert r.headers["x-fronde-class"] == "unsafe-for-spec"  # logprobs still are not


def test_unsafe_requests_stay_on_a_quarantined_baseline(serve: Any) -> None:
    c: TestClient = serve()
    far = time.monotonic() + 3600
    app: Any = c.app
    app.state.runtime.router.measurements.impose_quarantine(Mode.BASELINE, far)
    for body in UNSAFE_BODIES:
        r = c.post("/v1/chat/completions", json=body)
        assert r.status_code == 200
        assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == (
            "unsafe-for-spec",
            "baseline",
        )


def pool_of(fake_binary: Path, tmp_path: Path, knobs: dict[Mode, list[str]]) -> TestClient:
    specs = {
        m: LaunchSpec(m, fake_binary, ["--spec-type", str(m), *args], tmp_path / f"{m}.log")
        for m, args in knobs.items()
    }
    pool = BackendPool(PoolPlan(specs, {}), stop_grace_s=1.0, max_restarts=0)
    settings = load_settings(cache_dir=tmp_path, models_dir=tmp_path)
    return TestClient(create_app(settings, pool=pool), raise_server_exceptions=False)


def wait_for(c: TestClient, mode: str, states: set[str]) -> None:
    for _ in range(400):
        if c.get("/health").json()["backends"][mode]["state"] in states:
            return
        time.sleep(0.05)
    raise AssertionError(c.get("/health").json())


def test_forcing_a_speculative_mode_does_not_move_an_unsafe_request(serve: Any) -> None:
    c: TestClient = serve()
    for body in UNSAFE_BODIES:
        r = c.post("/v1/chat/completions", json={**body, "model": "fronde:ngram-mod"})
        assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == (
            "unsafe-for-spec",
            "baseline",
        )


def test_unsafe_requests_get_a_503_when_baseline_is_down(fake_binary: Path, tmp_path: Path) -> None:
    knobs = {Mode.BASELINE: ["--fake-exit-on-start", "1"], Mode.NGRAM_SIMPLE: []}
    with pool_of(fake_binary, tmp_path, knobs) as c:
        wait_for(c, "ngram-simple", {"ready"})
        wait_for(c, "baseline", {"failed"})
        for body in UNSAFE_BODIES:
            r = c.post("/v1/chat/completions", json=body)
            assert r.status_code == 503, r.text
            assert r.headers["x-fronde-mode"] == "baseline"
            assert "retry-after" in r.headers
        assert c.post("/v1/chat/completions", json=chat(WORDS)).status_code == 200


def test_unsafe_requests_get_a_503_that_says_to_add_baseline(
    fake_binary: Path, tmp_path: Path
) -> None:
    with pool_of(fake_binary, tmp_path, {Mode.NGRAM_MOD: []}) as c:
        wait_for(c, "ngram-mod", {"ready"})
        r = c.post("/v1/chat/completions", json=UNSAFE_BODIES[0])
        assert r.status_code == 503
        assert "--mode baseline" in r.json()["error"]["message"]
        assert c.post("/v1/chat/completions", json=chat(WORDS)).status_code == 200


# --- client mistakes are 4xx (cases 8-14) --------------------------------------------


def raw(c: TestClient, text: str, path: str = "/v1/chat/completions") -> Any:
    return c.post(path, content=text.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    ("text", "path", "param"),
    [
        (
            '{"messages": [{"role": "user", "content": "emoji \\ud83d cut"}]}',
            "/v1/chat/completions",
            "messages[0].content",
        ),
        ('{"prompt": "x \\udcf0 y"}', "/v1/completions", "prompt"),
        ('{"prompt": "x", "min_p": NaN}', "/v1/completions", "min_p"),
        ('{"prompt": "x", "top_k": NaN}', "/v1/completions", "top_k"),
        ('{"prompt": "x", "repeat_penalty": Infinity}', "/v1/completions", "repeat_penalty"),
        ('{"prompt": "x", "temperature": 1e999}', "/v1/completions", "temperature"),
        ('{"prompt": "x", "stop": [-Infinity]}', "/v1/completions", "stop[0]"),
    ],
)
def test_what_json_cannot_carry_is_a_400_naming_the_field(
    plain: TestClient, text: str, path: str, param: str
) -> None:
    r = raw(plain, text, path)
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["type"], r.json()["error"]["param"]) == (
        "invalid_request_error",
        param,
    )


def test_a_surrogate_pair_is_a_character_not_an_error(plain: TestClient) -> None:
    r = raw(plain, '{"messages": [{"role": "user", "content": "emoji \\ud83d\\ude00 whole"}]}')
    assert r.status_code == 200


@pytest.mark.parametrize(
    ("field", "value"), [("min_p", 2), ("top_k", "40"), ("repeat_penalty", -1)]
)
def test_llama_cpp_sampling_fields_are_checked(plain: TestClient, field: str, value: Any) -> None:
    r = plain.post("/v1/chat/completions", json=chat(WORDS, **{field: value}))
    assert (r.status_code, r.json()["error"]["param"]) == (400, field)


def history(tool_call_id: Any, call_id: Any) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function"}
    call["function"] = {"name": "get_time", "arguments": "{}"}
    return [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": tool_call_id, "content": "noon"},
    ]


def test_null_tool_ids_are_dropped_not_a_500(plain: TestClient) -> None:
    body = {"messages": history(None, None), "max_tokens": 3, "model": "fronde:baseline"}
    r = plain.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    sent = r.json()["fake_received"]["body"]["messages"]
    assert "tool_call_id" not in sent[2] and "id" not in sent[1]["tool_calls"][0]


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (history(5, "c1"), "messages[2].tool_call_id"),
        (history("c1", 7), "messages[1].tool_calls[0].id"),
        ([{"role": "assistant", "content": "x", "tool_calls": [{"id": "a"}]}], None),
        ([{"role": "user", "content": "x", "name": 3}], "messages[0].name"),
    ],
)
def test_malformed_tool_history_is_a_400(
    plain: TestClient, messages: list[Any], param: str | None
) -> None:
    r = plain.post("/v1/chat/completions", json={"messages": messages})
    assert r.status_code == 400
    if param is not None:
        assert r.json()["error"]["param"] == param


def test_an_image_for_a_text_model_is_a_400(plain: TestClient) -> None:
    parts = [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    ]
    r = plain.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": parts}]})
    err = r.json()["error"]
    assert (r.status_code, err["type"], err["param"]) == (
        400,
        "invalid_request_error",
        "messages[0].content[1]",
    )
    assert "text only" in err["message"]
    text_only = [{"role": "user", "content": parts[:1]}]
    assert plain.post("/v1/chat/completions", json={"messages": text_only}).status_code == 200


def test_a_routed_stream_over_the_context_is_a_400_before_any_byte(serve: Any) -> None:
    c = serve({m: ["--fake-ctx", "5"] for m in MODES}, router=ORIGINAL_ROUTER)
    body = {**chat("one two three four five six seven"), "stream": True}
    with c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.headers["x-fronde-class"] == "probe"
        assert r.status_code == 400
        assert json.loads(r.read())["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("ctx", [30, 64])  # the context fills in the probe, or after it
@pytest.mark.parametrize("stream", [False, True])
def test_a_probe_that_fills_the_context_ends_the_answer_as_length(
    serve: Any, ctx: int, stream: bool
) -> None:
    """A prompt that fits but leaves less room than max_tokens: one backend stops with
    "length" when its context is full, and so must the probe path (no 400, no error)."""
    c = serve({m: ["--fake-ctx", str(ctx)] for m in MODES}, router=ORIGINAL_ROUTER)
    body = {"prompt": "abc", "max_tokens": 100, "stream": stream}  # BOS + 3 ids
    if stream:
        events = sse_events(c, body, "/v1/completions")
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["choices"][0]["finish_reason"] == "length"
        assert last["timings"]["predicted_n"] == ctx - 4
        return
    r = c.post("/v1/completions", json=body)
    assert (r.status_code, r.headers["x-fronde-class"]) == (200, "probe"), r.text
    assert r.json()["choices"][0]["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == ctx - 4


@pytest.mark.parametrize("path", ["/health", "/health/live", "/v1/models"])
def test_head_is_answered_like_get(plain: TestClient, path: str) -> None:
    r = plain.head(path)
    assert (r.status_code, r.content) == (200, b"")
    assert r.headers["content-type"] == plain.get(path).headers["content-type"]


def test_a_named_tool_choice_reaches_the_backend_as_required(plain: TestClient) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    body = chat(WORDS, tools=TOOLS, tool_choice=choice)
    r = plain.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    [call] = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"  # the fake calls the first tool it gets


@pytest.mark.parametrize(
    "choice",
    [{"type": "function", "function": {"name": "nope"}}, {"type": "function"}, "always"],
)
def test_a_tool_choice_naming_no_tool_is_a_400(plain: TestClient, choice: Any) -> None:
    r = plain.post("/v1/chat/completions", json=chat(WORDS, tools=TOOLS, tool_choice=choice))
    assert (r.status_code, r.json()["error"]["param"]) == (400, "tool_choice")


def test_a_forced_call_without_tools_is_a_400(plain: TestClient) -> None:
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        r = plain.post("/v1/chat/completions", json=chat(WORDS, tool_choice=choice))
        assert (r.status_code, r.json()["error"]["param"]) == (400, "tool_choice")


def test_a_template_without_tools_refuses_a_forced_call(serve: Any) -> None:
    c = serve({m: ["--fake-no-tool-template"] for m in MODES})
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        r = c.post("/v1/chat/completions", json=chat(WORDS, tools=TOOLS, tool_choice=choice))
        err = r.json()["error"]
        assert (r.status_code, err["code"], err["param"]) == (
            400,
            "tool_choice_unsupported",
            "tool_choice",
        )
    ok = c.post("/v1/chat/completions", json=chat(WORDS, tools=TOOLS, tool_choice="auto"))
    assert ok.status_code == 200


# --- a client that leaves (case 15) --------------------------------------------------


@pytest.fixture
def slow(tmp_path: Path, fake_binary: Path) -> Iterator[str]:
    """`fronde serve` over fakes decoding 20 tok/s; yields its base URL."""
    with real_serve(tmp_path, fake_binary, backend={"extra_args": ["--fake-tps", "20"]}) as s:
        yield s.base


def processing(base: str, mode: str) -> bool:
    r = httpx.get(f"{base}/slots", params={"mode": mode}, timeout=5)
    return bool(r.json()[0]["is_processing"])


def freed_within(base: str, modes: list[str], seconds: float) -> bool:
    left = time.monotonic()
    while time.monotonic() - left < seconds:
        if not any(processing(base, m) for m in modes):
            return True
        time.sleep(0.02)
    return False


def leave_after(base: str, path: str, body: dict[str, Any], seconds: float) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{base}{path}", json=body, timeout=httpx.Timeout(5, read=seconds))


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat(WORDS, max_tokens=400, model="fronde:ngram-mod")),
        ("/v1/chat/completions", chat(WORDS, max_tokens=400)),  # routed: the probe
        ("/fronde/v1/batch", {"requests": [chat(WORDS, max_tokens=400, model="fronde:ngram-mod")]}),
    ],
    ids=["forced", "probe", "batch"],
)
def test_a_non_streamed_client_that_leaves_frees_the_slot_within_a_second(
    slow: str, path: str, body: dict[str, Any]
) -> None:
    leave_after(slow, path, body, 1.0)
    assert freed_within(slow, ["baseline", "ngram-mod"], 1.0)
    rows = httpx.get(f"{slow}/fronde/v1/router").json()["recent"]
    assert rows[-1]["status"] == "cancelled"


def test_a_queued_client_that_leaves_never_generates(slow: str) -> None:
    first = chat(WORDS, max_tokens=40, model="fronde:baseline")  # 2 s on the only slot
    holder = threading.Thread(
        target=lambda: httpx.post(f"{slow}/v1/chat/completions", json=first, timeout=30)
    )
    holder.start()
    time.sleep(0.3)
    queued = chat(WORDS, max_tokens=400, model="fronde:ngram-mod")
    leave_after(slow, "/v1/chat/completions", queued, 0.5)
    holder.join(30)
    time.sleep(0.5)  # had it not been dropped, it would be generating now
    assert not processing(slow, "ngram-mod")
    statuses = [r["status"] for r in httpx.get(f"{slow}/fronde/v1/router").json()["recent"]]
    assert statuses[-2:] == ["done", "cancelled"] or statuses[-2:] == ["cancelled", "done"]
