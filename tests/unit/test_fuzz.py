"""A fuzz pass over the request schema: whatever a client sends, never a 500.

Hypothesis builds bodies from OpenAI's fields with values of every JSON type
(right and wrong), plus raw bytes that are not JSON at all. The backends are
fakes, so each example costs milliseconds. Each answer must be a 2xx, or a 4xx
with the OpenAI error shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_contract import make_client, ready

# NaN, Infinity and lone surrogates: Python's JSON reads them, no backend can (issue 17).
ODD_TEXT = st.sampled_from(["emoji \ud83d cut", "\udcf0", "a\ud800b\udfff"])
JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    ODD_TEXT,
)
ANY_JSON = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
PART = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["text", "image_url", "input_audio", "file"]), ANY_JSON)},
    optional={"text": ANY_JSON, "image_url": ANY_JSON},
)
NO_KEYS: dict[str, st.SearchStrategy[Any]] = {}
FUNCTION: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    NO_KEYS, optional={"name": ANY_JSON, "arguments": ANY_JSON}
)
TOOL_CALL: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    NO_KEYS,
    optional={
        "id": ANY_JSON,
        "type": st.one_of(st.just("function"), ANY_JSON),
        "function": st.one_of(FUNCTION, ANY_JSON),
    },
)
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.one_of(
            st.sampled_from(["user", "system", "assistant", "tool", "developer", "robot", ""]),
            ANY_JSON,
        )
    },
    optional={
        "content": st.one_of(st.text(max_size=30), st.lists(PART, max_size=2), ANY_JSON),
        "name": ANY_JSON,
        "tool_call_id": ANY_JSON,
        "tool_calls": st.one_of(st.lists(TOOL_CALL, max_size=2), ANY_JSON),
    },
)
NAMED: dict[str, st.SearchStrategy[Any]] = {"name": ANY_JSON}
NAMED_CHOICE: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries(NAMED)}
)
FIELDS = {
    "model": st.one_of(
        st.sampled_from(["fronde", "fronde:baseline", "fronde:nope", "gpt-4o"]), ANY_JSON
    ),
    "max_tokens": st.one_of(st.integers(-2, 6), ANY_JSON),
    "max_completion_tokens": st.one_of(st.integers(-2, 6), ANY_JSON),
    "temperature": ANY_JSON,
    "top_p": ANY_JSON,
    "n": st.one_of(st.integers(-1, 3), ANY_JSON),
    "stop": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3), ANY_JSON),
    "stream": st.one_of(st.booleans(), ANY_JSON),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.booleans()}), ANY_JSON),
    "seed": ANY_JSON,
    "logprobs": ANY_JSON,
    "top_logprobs": ANY_JSON,
    "tools": ANY_JSON,
    "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), NAMED_CHOICE, ANY_JSON),
    "min_p": ANY_JSON,
    "top_k": ANY_JSON,
    "repeat_penalty": ANY_JSON,
    "response_format": ANY_JSON,
}
CHAT_BODY = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(MESSAGE, min_size=1, max_size=3), ANY_JSON)},
    optional=FIELDS,
)
TEXT_BODY = st.fixed_dictionaries(
    {"prompt": st.one_of(st.text(max_size=40), st.lists(st.integers(0, 50), max_size=5), ANY_JSON)},
    optional=FIELDS,
)


@pytest.fixture(scope="module")
def fuzzed(fake_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder = tmp_path_factory.mktemp("fuzz")
    with make_client(fake_binary, folder, server={"default_max_tokens": 4}) as c:
        yield ready(c)


def check(r: Any) -> None:
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        err = r.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}


FUZZ = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(body=CHAT_BODY)
def test_chat_bodies_never_500(fuzzed: TestClient, body: dict[str, Any]) -> None:
    check(fuzzed.post("/v1/chat/completions", content=json.dumps(body)))


@FUZZ
@given(body=TEXT_BODY)
def test_completion_bodies_never_500(fuzzed: TestClient, body: dict[str, Any]) -> None:
    check(fuzzed.post("/v1/completions", content=json.dumps(body)))


@FUZZ
@given(raw=st.binary(max_size=64) | ANY_JSON.map(lambda v: json.dumps(v).encode()))
def test_raw_bodies_never_500(fuzzed: TestClient, raw: bytes) -> None:
    check(fuzzed.post("/v1/chat/completions", content=raw))


BLOCK = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["text", "input_text", "tool_use", "image"]), ANY_JSON)},
    optional={"text": ANY_JSON, "input": ANY_JSON, "content": ANY_JSON},
)
ITEM = st.fixed_dictionaries(
    NO_KEYS,
    optional={
        "role": st.one_of(st.sampled_from(["user", "assistant", "system", "robot"]), ANY_JSON),
        "type": ANY_JSON,
        "content": st.one_of(st.text(max_size=20), st.lists(BLOCK, max_size=2), ANY_JSON),
    },
)
OTHER_FIELDS = {
    "model": FIELDS["model"],
    "stream": FIELDS["stream"],
    "temperature": ANY_JSON,
    "top_p": ANY_JSON,
    "top_k": ANY_JSON,
    "tools": ANY_JSON,
}
RESPONSES_BODY = st.fixed_dictionaries(
    {"input": st.one_of(st.text(max_size=20), st.lists(ITEM, max_size=3), ANY_JSON)},
    optional=OTHER_FIELDS
    | {
        "max_output_tokens": st.one_of(st.integers(-2, 6), ANY_JSON),
        "instructions": ANY_JSON,
        "text": ANY_JSON,
        "previous_response_id": ANY_JSON,
    },
)
MESSAGES_BODY = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(ITEM, min_size=1, max_size=3), ANY_JSON)},
    optional=OTHER_FIELDS
    | {
        "max_tokens": st.one_of(st.integers(-2, 6), ANY_JSON),
        "system": ANY_JSON,
        "stop_sequences": ANY_JSON,
    },
)
INFILL_BODY = st.fixed_dictionaries(
    NO_KEYS,
    optional=OTHER_FIELDS
    | {
        "input_prefix": st.one_of(st.text(max_size=20), ANY_JSON),
        "input_suffix": st.one_of(st.text(max_size=20), ANY_JSON),
        "input_extra": ANY_JSON,
        "n_predict": st.one_of(st.integers(-2, 6), ANY_JSON),
    },
)


@FUZZ
@given(body=RESPONSES_BODY)
def test_responses_bodies_never_500(fuzzed: TestClient, body: dict[str, Any]) -> None:
    check(fuzzed.post("/v1/responses", content=json.dumps(body)))


@FUZZ
@given(body=INFILL_BODY)
def test_infill_bodies_never_500(fuzzed: TestClient, body: dict[str, Any]) -> None:
    check(fuzzed.post("/infill", content=json.dumps(body)))


@FUZZ
@given(body=MESSAGES_BODY)
def test_messages_bodies_never_500_and_errors_are_anthropic_shaped(
    fuzzed: TestClient, body: dict[str, Any]
) -> None:
    r = fuzzed.post("/v1/messages", content=json.dumps(body))
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert r.json()["type"] == "error"
        assert set(r.json()["error"]) == {"type", "message"}
