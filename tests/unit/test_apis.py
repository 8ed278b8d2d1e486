"""OpenAI Responses, Anthropic Messages and infill through Fronde, over fake backends.

Driven with the official SDKs where one exists. The fake answers in llama-server
b11434's shapes (``tests/fakes/fake_llama_server.py``); the real ones are in
``tests/integration/test_apis_real.py``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from fastapi.testclient import TestClient

from fronde.config_sections import ServerSettings
from fronde.json_types import JSONObject
from fronde.modes import Mode
from fronde.request.agent_apis import (
    ResponsesIndexer,
    StopSequenceReason,
    infill_view,
    messages_view,
    responses_view,
)

from .test_contract import real_serve

pytestmark = pytest.mark.filterwarnings("error")


def row(c: TestClient, rid: str) -> dict[str, Any]:
    """The router's row for one request (``x-fronde-request-id``)."""
    rows = c.get("/fronde/v1/router").json()["recent"]
    return next(r for r in rows if r["id"] == rid)


def events(text: str) -> list[tuple[str | None, dict[str, Any]]]:
    """An SSE body as (event name, data) pairs."""
    out: list[tuple[str | None, dict[str, Any]]] = []
    name: str | None = None
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[6:])))
            name = None
    return out


# --- the router's view of each body -----------------------------------------------------


def test_responses_view_reads_instructions_items_budget_and_unsafe_fields() -> None:
    body = {
        "model": "fronde",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Fix this."}]},
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"p": 1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "def f(): pass"},
        ],
        "max_output_tokens": 50,
        "temperature": 0,
    }
    view = responses_view(body)
    assert [m["role"] for m in view["messages"]] == ["system", "user", "assistant", "assistant"]
    assert view["messages"][1]["content"] == "Fix this."
    assert '{"p": 1}' in view["messages"][2]["content"]
    assert view["messages"][3]["content"] == "def f(): pass"
    assert view["max_tokens"] == 50 and view["temperature"] == 0
    assert "tools" not in view and "response_format" not in view
    fmt = {"type": "json_schema", "name": "x", "schema": {"type": "object"}}
    assert responses_view(body | {"text": {"format": fmt}})["response_format"] == fmt
    assert "response_format" not in responses_view(body | {"text": {"format": {"type": "text"}}})
    assert responses_view(body | {"tools": [{"type": "function", "name": "read"}]})["tools"]
    assert responses_view({"input": "hi"})["messages"] == [{"role": "user", "content": "hi"}]


def test_messages_view_reads_system_blocks_tools_and_stops() -> None:
    body = {
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "Read it."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "read", "input": {"p": 1}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x = 1"}],
            },
        ],
        "max_tokens": 20,
        "stop_sequences": ["\n\n"],
    }
    view = messages_view(body)
    assert [m["content"] for m in view["messages"]] == [
        "Be brief.",
        "Read it.",
        '{"p": 1}',
        "x = 1",
    ]
    assert view["max_tokens"] == 20 and view["stop"] == ["\n\n"]
    assert "tools" not in view
    assert messages_view(body | {"tools": [{"name": "read", "input_schema": {}}]})["tools"]


def test_infill_view_is_a_prompt_of_extra_prefix_and_suffix() -> None:
    body = {
        "input_extra": [{"filename": "a.py", "text": "import os"}],
        "input_prefix": "def f():\n    ",
        "input_suffix": "\nprint(f())",
        "n_predict": 8,
        "grammar": "root ::= [a-z]+",
    }
    view = infill_view(body)
    assert view["prompt"] == "import os\ndef f():\n    \n\nprint(f())"
    assert view["max_tokens"] == 8 and view["grammar"] == body["grammar"]


# --- OpenAI Responses --------------------------------------------------------------------


def test_responses_sdk_whole_and_streamed_are_routed_and_measured(plain: TestClient) -> None:
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=plain)
    raw = client.responses.with_raw_response.create(
        model="fronde", input="alpha beta gamma", max_output_tokens=6
    )
    whole = raw.parse()
    assert whole.output_text.split() == ["alpha", "beta", "gamma"] * 2
    assert raw.headers["x-fronde-class"] not in ("", "unsafe-for-spec")
    got = whole.model_extra or {}
    assert got["fake_received"]["body"]["max_output_tokens"] == 6  # passed through as sent
    streamed: list[str] = []
    done = None
    # Raw events: the SDK's .stream() helper wants every item event, which the fake skips
    # (the real server sends them: tests/integration/test_apis_real.py).
    s = client.responses.create(
        model="fronde", input="alpha beta", max_output_tokens=4, stream=True
    )
    with s:
        for event in s:
            if event.type == "response.output_text.delta":
                streamed.append(event.delta)
            elif event.type == "response.completed":
                done = event
    assert "".join(streamed).split() == ["alpha", "beta"] * 2
    assert done is not None
    rid = plain.get("/fronde/v1/router").json()["recent"][-1]["id"]
    measured = row(plain, rid)
    assert measured["status"] == "done"
    assert measured["decode_tok_s"] == pytest.approx(500.0)  # the last event's timings
    assert measured["streamed"] >= 4


def test_a_responses_default_budget_and_a_forced_mode(plain: TestClient) -> None:
    r = plain.post("/v1/responses", json={"model": "fronde:ngram-simple", "input": "a"})
    assert r.status_code == 200, r.text
    assert r.headers["x-fronde-mode"] == "ngram-simple"
    assert r.headers["x-fronde-class"] == "forced"
    default = ServerSettings().default_max_tokens
    assert r.json()["fake_received"]["body"]["max_output_tokens"] == default


def test_responses_with_tools_go_to_baseline_with_a_schema_are_routed(plain: TestClient) -> None:
    tools = [{"type": "function", "name": "read", "parameters": {"type": "object"}}]
    r = plain.post("/v1/responses", json={"input": "read a", "tools": tools})
    assert (r.headers["x-fronde-class"], r.headers["x-fronde-mode"]) == (
        "unsafe-for-spec",
        "baseline",
    )
    fmt = {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}
    r = plain.post("/v1/responses", json={"input": "a", "text": fmt})
    assert r.headers["x-fronde-class"] != "unsafe-for-spec"  # the matrix cleared schemas
    r = plain.post("/v1/responses", json={"input": "a", "top_logprobs": 2})
    assert r.headers["x-fronde-class"] == "unsafe-for-spec"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "input"),
        ({"input": 3}, "input"),
        ({"input": [1]}, "input[0]"),
        ({"input": "a", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "a", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "a", "temperature": 3}, "temperature"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0]",
        ),
    ],
)
def test_bad_responses_bodies_are_openai_400s(
    plain: TestClient, body: dict[str, Any], param: str
) -> None:
    r = plain.post("/v1/responses", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_typeless_assistant_item_is_a_message_so_a_second_turn_answers(
    plain: TestClient,
) -> None:
    """The SDKs' shorthand for an earlier answer; b11434 (and the fake) 400 it untyped."""
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=plain)
    turns: Any = [
        {"role": "user", "content": "Favourite colour?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sky blue."}]},
        {"role": "user", "content": "Why?"},
    ]
    second = client.responses.create(model="fronde", input=turns, max_output_tokens=4)
    assert second.output_text.split()
    sent = (second.model_extra or {})["fake_received"]["body"]["input"]
    assert [item.get("type") for item in sent] == ["message"] * 4
    assert sent[1] == {"role": "assistant", "content": "Blue.", "type": "message"}


# --- Anthropic Messages ------------------------------------------------------------------


def test_messages_sdk_whole_and_streamed(plain: TestClient) -> None:
    client = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=plain)
    msg = client.messages.create(
        model="fronde",
        max_tokens=4,
        messages=[{"role": "user", "content": "alpha beta"}],
    )
    assert msg.content[0].type == "text"
    assert msg.content[0].text.split() == ["alpha", "beta"] * 2
    with client.messages.stream(
        model="fronde", max_tokens=3, messages=[{"role": "user", "content": "one two three"}]
    ) as s:
        text = "".join(s.text_stream)
    assert text.split() == ["one", "two", "three"]
    rid = plain.get("/fronde/v1/router").json()["recent"][-1]["id"]
    finished = row(plain, rid)
    assert finished["status"] == "done" and finished["streamed"] == 3
    assert finished["decode_tok_s"] is None  # b11434 sends Messages no timings


def test_a_matched_stop_sequence_is_anthropics_stop_reason_streamed_or_not(
    plain: TestClient,
) -> None:
    """b11434 says ``end_turn`` (with the string in ``stop_sequence``): the fake does too."""
    client = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=plain)

    def create(stops: list[str]) -> anthropic.types.Message:
        return client.messages.create(
            model="fronde",
            max_tokens=8,
            messages=[{"role": "user", "content": "alpha beta gamma"}],
            stop_sequences=stops,
        )

    msg = create(["zeta", "gamma"])
    assert msg.content[0].type == "text" and msg.content[0].text == "alpha beta "
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "gamma")
    with client.messages.stream(
        model="fronde",
        max_tokens=8,
        messages=[{"role": "user", "content": "alpha beta gamma"}],
        stop_sequences=["zeta", "gamma"],
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "alpha beta "
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "gamma")
    unmatched = create(["zeta"])
    assert (unmatched.stop_reason, unmatched.stop_sequence) == ("max_tokens", None)
    ask = {"max_tokens": 8, "messages": [{"role": "user", "content": "alpha beta gamma"}]}
    streamed = ask | {"stop_sequences": ["gamma"], "stream": True}
    with plain.stream("POST", "/v1/messages", json=streamed) as r:
        ends = [d for n, d in events(r.read().decode()) if n == "message_delta"]
    assert [e["delta"] for e in ends] == [
        {"stop_reason": "stop_sequence", "stop_sequence": "gamma"}
    ]


def test_a_stop_string_the_request_did_not_send_is_an_end_of_turn() -> None:
    """A chat template's own stop string (llama.cpp's ``additional_stops``) is not the
    client's stop sequence: the turn ended, and ``stop_sequence`` is null."""
    mend = StopSequenceReason({"stop_sequences": ["END"]})
    ended: JSONObject = {
        "type": "message",
        "stop_reason": "end_turn",
        "stop_sequence": "</assistant>",
    }
    assert mend(ended) == {"type": "message", "stop_reason": "end_turn", "stop_sequence": None}
    delta: JSONObject = {"stop_reason": "end_turn", "stop_sequence": "END"}
    got = mend({"type": "message_delta", "delta": dict(delta)})["delta"]
    assert got == {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    tool: JSONObject = {"type": "message", "stop_reason": "tool_use", "stop_sequence": None}
    assert mend(dict(tool)) == tool


def test_bad_messages_bodies_are_anthropic_400s_not_the_backends_500(plain: TestClient) -> None:
    client = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=plain)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="fronde", max_tokens=4, messages=[])
    body = caught.value.body
    assert isinstance(body, dict)
    assert body == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "'messages' must be a non-empty array",
        },
    }
    r = plain.post("/v1/messages", json={"messages": [{"role": "system", "content": "x"}]})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "messages[0].role" in r.json()["error"]["message"]
    r = plain.post(
        "/v1/messages", json={"messages": [{"role": "user", "content": "x"}], "temperature": 1.5}
    )
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]


def test_an_api_key_in_x_api_key_is_accepted_and_a_wrong_one_gets_anthropics_401(
    serve: Any,
) -> None:
    c: TestClient = serve(server={"api_keys": ["k1"]})
    body = {"max_tokens": 2, "messages": [{"role": "user", "content": "a"}]}
    assert c.post("/v1/messages", json=body, headers={"x-api-key": "k1"}).status_code == 200
    r = c.post("/v1/messages", json=body, headers={"x-api-key": "nope"})
    assert r.status_code == 401
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "authentication_error"
    assert c.post("/v1/responses", json={"input": "a"}).json()["error"]["code"] == "invalid_api_key"


# --- a forced tool call where the chat template takes no tools ------------------------

RESPONSES_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "get_time", "parameters": {"type": "object"}}
]
MESSAGES_TOOLS: list[Any] = [{"name": "get_time", "input_schema": {"type": "object"}}]


def test_a_template_without_tools_refuses_a_forced_call_on_responses_and_messages(
    serve: Any,
) -> None:
    """The chat rule (400 ``tool_choice_unsupported``), in each API's own error shape."""
    c: TestClient = serve({m: ["--fake-no-tool-template"] for m in Mode})
    oai = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=c)
    tools: Any = RESPONSES_TOOLS
    forcing: list[Any] = ["required", {"type": "function", "name": "get_time"}]
    for choice in forcing:
        with pytest.raises(openai.BadRequestError) as refused:
            oai.responses.create(model="fronde", input="a", tools=tools, tool_choice=choice)
        assert (refused.value.code, refused.value.param) == (
            "tool_choice_unsupported",
            "tool_choice",
        )
    for choice in ("auto", "none"):
        ok = oai.responses.create(model="fronde", input="a", tools=tools, tool_choice=choice)
        assert ok.output_text
    claude = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=c)

    def ask(choice: Any) -> anthropic.types.Message:
        return claude.messages.create(
            model="fronde",
            max_tokens=4,
            messages=[{"role": "user", "content": "a"}],
            tools=MESSAGES_TOOLS,
            tool_choice=choice,
        )

    for choice in ({"type": "any"}, {"type": "tool", "name": "get_time"}):
        with pytest.raises(anthropic.BadRequestError) as caught:
            ask(choice)
        body: Any = caught.value.body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert '{"type": "auto"}' in body["error"]["message"]  # what to send instead
    for choice in ({"type": "auto"}, {"type": "none"}):
        assert ask(choice).content


def test_a_named_tool_choice_is_narrowed_to_its_tool_on_responses_and_messages(
    plain: TestClient,
) -> None:
    """b11434 reads Responses' named choice as ``auto``, and Messages' as ``required``
    over every tool: Fronde sends the named tool alone, forced."""
    two: list[Any] = [*RESPONSES_TOOLS, {"type": "function", "name": "get_date", "parameters": {}}]
    choice = {"type": "function", "name": "get_date"}
    r = plain.post("/v1/responses", json={"input": "a", "tools": two, "tool_choice": choice})
    sent = r.json()["fake_received"]["body"]
    assert (sent["tools"], sent["tool_choice"]) == (two[1:], "required")
    tools: list[Any] = [*MESSAGES_TOOLS, {"name": "get_date", "input_schema": {}}]
    named = {"type": "tool", "name": "get_date"}
    msg: dict[str, Any] = {
        "messages": [{"role": "user", "content": "a"}],
        "tools": tools,
        "tool_choice": named,
    }
    sent = plain.post("/v1/messages", json=msg).json()["fake_received"]["body"]
    assert (sent["tools"], sent["tool_choice"]) == (tools[1:], named)


@pytest.mark.parametrize(
    ("path", "choice"),
    [
        ("/v1/responses", {"type": "function", "name": "nope"}),
        ("/v1/responses", "always"),
        ("/v1/responses", 3),
        ("/v1/messages", {"type": "tool", "name": "nope"}),
        ("/v1/messages", {"type": "required"}),
        ("/v1/messages", "any"),
    ],
)
def test_a_tool_choice_the_api_does_not_define_is_its_400(
    plain: TestClient, path: str, choice: Any
) -> None:
    if path == "/v1/responses":
        body: dict[str, Any] = {"input": "a", "tools": RESPONSES_TOOLS}
    else:
        body = {"messages": [{"role": "user", "content": "a"}], "tools": MESSAGES_TOOLS}
    r = plain.post(path, json=body | {"tool_choice": choice})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and "tool_choice" in error["message"]
    no_tools = {k: v for k, v in body.items() if k != "tools"}
    forced = "required" if path == "/v1/responses" else {"type": "any"}
    r = plain.post(path, json=no_tools | {"tool_choice": forced})
    assert r.status_code == 400 and "has no 'tools'" in r.json()["error"]["message"]


# --- infill, embeddings, token counts ----------------------------------------------------


def test_infill_whole_and_streamed_feed_the_router(plain: TestClient) -> None:
    body = {"input_prefix": "x = ", "input_suffix": "\n", "n_predict": 3}
    r = plain.post("/infill", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["content"].split() == ["x", "=", "x"]
    assert row(plain, r.headers["x-fronde-request-id"])["decode_tok_s"] == pytest.approx(500.0)
    with plain.stream("POST", "/infill", json=body | {"stream": True}) as s:
        got = events(s.read().decode())
        rid = s.headers["x-fronde-request-id"]
    assert got[-1][1]["stop"] is True
    assert "".join(d["content"] for _, d in got).split() == ["x", "=", "x"]
    assert row(plain, rid)["status"] == "done"
    assert row(plain, rid)["decode_tok_s"] == pytest.approx(500.0)
    assert (
        plain.post("/infill", json={"input_prefix": 3}).json()["error"]["param"] == "input_prefix"
    )


def test_embeddings_and_rerank_are_clean_404s(plain: TestClient) -> None:
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=plain)
    with pytest.raises(openai.NotFoundError) as caught:
        client.embeddings.create(model="fronde", input="hello")
    assert "--embeddings" in caught.value.message
    r = plain.post("/v1/rerank", json={"query": "a", "documents": ["b"]})
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


# --- broken streams end with the API's error event -------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("/v1/responses", {"input": "a b c", "max_output_tokens": 8}, "type"),
        (
            "/v1/messages",
            {"max_tokens": 8, "messages": [{"role": "user", "content": "a b"}]},
            "error",
        ),
        ("/infill", {"input_prefix": "a b", "n_predict": 8}, "error"),
    ],
)
@pytest.mark.parametrize("knob", [["--fake-early-close", "2"], ["--fake-garbage"]])
def test_a_cut_stream_ends_with_the_apis_error_event_and_counts_as_an_error(
    serve: Any, path: str, body: dict[str, Any], error: str, knob: list[str]
) -> None:
    c: TestClient = serve({Mode.NGRAM_MOD: knob})
    with c.stream(
        "POST", path, json=body | {"stream": True}, headers={"x-fronde-mode": "ngram-mod"}
    ) as s:
        assert s.status_code == 200
        text = s.read().decode()
        rid = s.headers["x-fronde-request-id"]
    name, last = events(text.replace("data: {this is not json", ""))[-1]
    assert error in last
    if path == "/v1/messages":
        assert (name, last["error"]["type"]) == ("error", "api_error")
    elif path == "/v1/responses":
        assert (name, last["type"]) == ("error", "error")
    assert "response.completed" not in text and "message_stop" not in text
    assert row(c, rid)["status"] == "error"


def test_a_client_that_leaves_a_messages_stream_frees_the_slot(
    tmp_path: Path, fake_binary: Path
) -> None:
    slow = {"backend": {"extra_args": ["--fake-tps", "20"]}}
    with real_serve(tmp_path, fake_binary, **slow) as s:
        body = {"max_tokens": 400, "stream": True, "messages": [{"role": "user", "content": "a"}]}
        mode = {"x-fronde-mode": "ngram-mod"}
        with httpx.stream("POST", f"{s.base}/v1/messages", json=body, headers=mode) as r:
            lines = r.iter_lines()  # (breaking out of a for loop would close the stream)
            while "content_block_delta" not in next(lines):
                pass
            assert httpx.get(f"{s.base}/slots", headers=mode).json()[0]["is_processing"]
        left = time.monotonic()
        while time.monotonic() - left < 1.0:
            if not httpx.get(f"{s.base}/slots", headers=mode).json()[0]["is_processing"]:
                return
            time.sleep(0.02)
        raise AssertionError("the slot was still processing 1 s after the client left")


def test_the_indexer_numbers_llama_servers_responses_events_as_the_sdk_needs() -> None:
    """The event sequence b11434 sends (seen with curl), fields it leaves out added."""
    mend = ResponsesIndexer()
    item: dict[str, Any] = {"id": "msg_a", "type": "message", "role": "assistant", "content": []}
    sent: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1"}},
        {"type": "response.output_item.added", "item": item},
        {"type": "response.content_part.added", "item_id": "msg_a", "part": {"text": ""}},
        {"type": "response.output_text.delta", "item_id": "msg_a", "delta": "Hi"},
        {"type": "response.output_text.done", "item_id": "msg_a", "text": "Hi"},
        {"type": "response.output_item.done", "item": item},
        {"type": "response.output_item.added", "item": {"id": "fc_b", "type": "function_call"}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_b", "delta": "{}"},
        {"type": "response.completed", "response": {"id": "resp_1"}, "output_index": 7},
    ]
    got = [mend(dict(e)) for e in sent]
    assert [e["sequence_number"] for e in got] == list(range(9))
    assert [e.get("output_index") for e in got] == [None, 0, 0, 0, 0, 0, 1, 1, 7]
    assert [e.get("content_index") for e in got[2:5]] == [0, 0, 0]
    assert got[3]["logprobs"] == [] and got[3]["delta"] == "Hi"
    assert "content_index" not in got[7]


def test_a_token_count_without_messages_is_anthropics_400_not_the_backends_500(
    plain: TestClient,
) -> None:
    bodies: list[dict[str, Any]] = [{}, {"messages": []}, {"messages": "x"}]
    for body in bodies:
        r = plain.post("/v1/messages/count_tokens", json=body)
        assert r.status_code == 400, r.text
        assert r.json()["type"] == "error"
        assert r.json()["error"]["type"] == "invalid_request_error"
