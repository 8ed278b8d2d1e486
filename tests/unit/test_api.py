"""The OpenAI routes over fake llama-server backends (real pool, real processes)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fronde.modes import Mode

from .test_contract import make_client

MODES = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD]
CHAT = {"messages": [{"role": "user", "content": "alpha beta gamma"}], "max_tokens": 6}


def serve(
    fake_binary: Path,
    tmp_path: Path,
    knobs: dict[Mode, list[str]] | None = None,
    **overrides: Any,
) -> TestClient:
    """An app over three fake backends (draft left out), not yet started.

    ``overrides`` are settings, as :func:`~.test_contract.make_client` takes them.
    """
    return make_client(fake_binary, tmp_path, knobs, **overrides)


def wait_healthy(client: TestClient) -> None:
    """Wait until every configured backend is ready (not only the default one)."""
    for _ in range(400):
        states = {b["state"] for b in client.get("/health").json()["backends"].values()}
        if states <= {"ready", "left-out"}:
            return
        time.sleep(0.05)
    raise AssertionError(f"never healthy: {client.get('/health').json()}")


@pytest.fixture(scope="module")
def client(fake_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with serve(fake_binary, tmp_path_factory.mktemp("api")) as c:
        wait_healthy(c)
        yield c


def test_pass_through_names_the_public_model(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json={**CHAT, "model": "fronde:ngram-simple"})
    assert r.status_code == 200
    assert (r.headers["x-fronde-mode"], r.headers["x-fronde-class"]) == ("ngram-simple", "forced")
    body = r.json()
    assert body["model"] == "fronde"  # the public name, never a file path
    assert body["choices"][0]["message"]["content"].split()[:3] == ["alpha", "beta", "gamma"]


@pytest.mark.parametrize("mode", ["baseline", "ngram-simple", "ngram-mod"])
def test_mode_forced_by_header_and_by_model_name(client: TestClient, mode: str) -> None:
    r = client.post("/v1/chat/completions", json=CHAT, headers={"x-fronde-mode": mode})
    assert (r.status_code, r.headers["x-fronde-mode"], r.headers["x-fronde-class"]) == (
        200,
        mode,
        "forced",
    )
    r = client.post(
        "/v1/completions", json={"prompt": "one two", "model": f"fronde:{mode}", "max_tokens": 3}
    )
    assert (r.status_code, r.headers["x-fronde-mode"]) == (200, mode)
    assert r.json()["choices"][0]["text"] == "one two one "


def test_stream_relays_every_event_and_one_done(client: TestClient) -> None:
    body = {**CHAT, "stream": True, "model": "fronde:ngram-simple"}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-fronde-mode"] == "ngram-simple"
        lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert sum(ln == "data: [DONE]" for ln in lines) == 1
    chunks = [json.loads(ln[6:]) for ln in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text.split() == ["alpha", "beta", "gamma", "alpha", "beta", "gamma"]
    assert chunks[-1]["timings"]["predicted_n"] == 6


def test_crash_mid_stream_is_an_error_event_never_done(fake_binary: Path, tmp_path: Path) -> None:
    knobs = {Mode.NGRAM_SIMPLE: ["--fake-crash-after", "3"]}
    with serve(fake_binary, tmp_path, knobs) as c:
        wait_healthy(c)
        body = {**CHAT, "stream": True, "model": "fronde:ngram-simple"}
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = [ln for ln in r.iter_lines() if ln.startswith("data: ")]
    assert "data: [DONE]" not in lines
    last = json.loads(lines[-1][6:])
    assert last["error"]["type"] == "server_error"
    assert "ngram-simple" in last["error"]["message"]
    assert not any('"finish_reason": "stop"' in ln for ln in lines)


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"content": b"{not json"}, 400, "invalid_request"),
        ({"json": [1, 2]}, 400, "invalid_request"),
        ({"json": {"messages": []}}, 400, "invalid_request"),
        ({"json": {**CHAT, "stream": "yes"}}, 400, "invalid_request"),
        ({"json": {**CHAT, "model": "fronde:turbo"}}, 400, "unknown_mode"),
        ({"json": {**CHAT, "model": "fronde:draft"}}, 400, "mode_unavailable"),
        (
            {"json": {**CHAT, "fake_backend_error": True, "model": "fronde:baseline"}},
            400,
            "backend_rejected_request",
        ),
    ],
)
def test_bad_requests_get_openai_error_bodies(
    client: TestClient, kwargs: dict[str, object], status: int, code: str
) -> None:
    r = client.post("/v1/chat/completions", **kwargs)  # type: ignore[arg-type]
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["code"]) == ("invalid_request_error", code)


ASK = {"messages": [{"role": "user", "content": "alpha"}], "max_tokens": 2}
JSON_ROUTES = [
    ("/v1/chat/completions", CHAT),
    ("/v1/completions", {"prompt": "alpha beta", "max_tokens": 2}),
    ("/v1/responses", {"input": "alpha", "max_output_tokens": 2}),
    ("/v1/messages", ASK),
    ("/v1/messages/count_tokens", ASK),
    ("/infill", {"input_prefix": "alpha", "n_predict": 2}),
    ("/fronde/v1/batch", {"requests": [{"prompt": "alpha", "max_tokens": 2}]}),
    ("/tokenize", {"content": "alpha"}),
]
"""Every route that reads a JSON body, with a body it accepts."""


@pytest.mark.parametrize(("path", "body"), JSON_ROUTES)
def test_a_body_not_sent_as_json_is_a_415_that_says_what_to_send(
    client: TestClient, path: str, body: dict[str, Any]
) -> None:
    """``curl -d`` without ``-H`` sends a form type; a browser's bare fetch, text/plain."""
    raw = json.dumps(body).encode()
    for media in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"):
        r = client.post(path, content=raw, headers={"content-type": media})
        assert r.status_code == 415, (media, r.text)
        if path.startswith("/v1/messages"):  # Anthropic's shape
            assert (r.json()["type"], r.json()["error"]["type"]) == (
                "error",
                "invalid_request_error",
            )
        else:
            err = r.json()["error"]
            assert (err["type"], err["code"]) == ("invalid_request_error", "unsupported_media_type")
        assert "send the body as JSON with Content-Type: application/json" in r.text
    if path.endswith("/count_tokens"):
        return  # the fake serves no token count: refused or not is all there is to see
    for media in (None, "application/json; charset=utf-8", "application/vnd.api+json"):
        headers = {} if media is None else {"content-type": media}
        r = client.post(path, content=raw, headers=headers)
        assert r.status_code == 200, (media, r.text)


def test_unknown_mode_message_lists_the_known_ones(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json=CHAT, headers={"x-fronde-mode": "turbo"})
    assert "baseline, ngram-simple, ngram-mod, cascade, draft" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "x-fronde-mode"


def test_framework_errors_have_the_same_shape(client: TestClient) -> None:
    r = client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = client.get("/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_models_lists_modes_and_reports_the_left_out(client: TestClient) -> None:
    body = client.get("/v1/models").json()
    assert [m["id"] for m in body["data"]] == [
        "fronde",
        "fronde:baseline",
        "fronde:ngram-simple",
        "fronde:ngram-mod",
    ]
    assert body["unavailable"] == [{"id": "fronde:draft", "reason": "profile has no draft model"}]


def test_health_is_503_until_baseline_is_ready(fake_binary: Path, tmp_path: Path) -> None:
    knobs = {Mode.BASELINE: ["--fake-load-s", "2"]}
    with serve(fake_binary, tmp_path, knobs) as c:
        r = c.get("/health")
        assert r.status_code == 503
        assert r.json()["backends"]["baseline"]["state"] == "starting"
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "fronde:baseline"})
        assert r.status_code == 503 and "retry-after" in r.headers
        assert r.headers["x-fronde-mode"] == "baseline"
        wait_healthy(c)
        body = c.get("/health").json()
        assert body["backends"]["baseline"]["state"] == "ready"
        assert body["backends"]["draft"] == {
            "state": "left-out",
            "error": "profile has no draft model",
        }
