"""Operating Fronde: the canonical log line, the overhead header, merged metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from fastapi.testclient import TestClient

from fronde.metrics import merge_backend_metrics

from .test_contract import ORIGINAL_ROUTER, chat, make_client, ready

LLAMACPP = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
"""


def test_backend_metrics_are_renamed_and_labelled_by_mode() -> None:
    merged = merge_backend_metrics({"baseline": LLAMACPP, "ngram-mod": LLAMACPP, "draft": ""})
    lines = merged.splitlines()
    assert lines.count("# TYPE fronde_llamacpp_prompt_tokens_total counter") == 1
    assert 'fronde_llamacpp_prompt_tokens_total{mode="baseline"} 120' in lines
    assert 'fronde_llamacpp_prompt_tokens_total{mode="ngram-mod"} 120' in lines
    assert 'fronde_llamacpp_kv_cache_usage_ratio{mode="ngram-mod"} 0.25' in lines
    assert not any("llamacpp:" in line for line in lines)
    assert merge_backend_metrics({"baseline": "garbage\n"}) == ""


@pytest.fixture(scope="module")
def fakes(fake_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    folder = tmp_path_factory.mktemp("operate")
    with make_client(fake_binary, folder, router=ORIGINAL_ROUTER) as c:  # routed requests probe
        yield ready(c)


def test_one_canonical_log_line_per_request(fakes: TestClient) -> None:
    with structlog.testing.capture_logs() as logs:
        r = fakes.post("/v1/chat/completions", json=chat("alpha beta", max_tokens=60))
    assert r.status_code == 200
    [line] = [e for e in logs if e["event"] == "request.finished"]
    assert line["id"] == r.headers["x-fronde-request-id"]
    assert (line["status"], line["route"], line["static_class"]) == ("done", "probe", "general")
    assert line["mode"] == r.headers["x-fronde-mode"]
    assert line["probe"] in ("won", "lost")
    assert line["tokens"] == 60
    assert line["decode_tok_s"] == 500.0 and line["alpha"] == 0.5  # the fakes' speed and α
    assert "tau" in line  # (None here: the fake accepts as many tokens as it generates)
    assert line["overhead_ms"] == pytest.approx(float(r.headers["x-fronde-overhead-ms"]), abs=1e-3)
    assert line["error"] is None


def test_overhead_header_and_the_metrics_an_operator_needs(fakes: TestClient) -> None:
    r = fakes.post("/v1/chat/completions", json=chat(model="fronde:baseline", max_tokens=5))
    assert 0.0 <= float(r.headers["x-fronde-overhead-ms"]) < 200.0
    text = fakes.get("/metrics").text
    for needle in (
        "fronde_overhead_seconds_bucket",
        'fronde_probes_total{mode="ngram-mod",outcome=',
        'fronde_backend_restarts_total{mode="baseline"} 0.0',
        'fronde_alpha{mode="ngram-mod"}',
        'fronde_requests_total{mode="baseline",path="/v1/chat/completions",route="forced",status="200"}',
        'fronde_llamacpp_tokens_predicted_total{mode="baseline"}',
        'fronde_llamacpp_requests_processing{mode="ngram-mod"} 0',
    ):
        assert needle in text, needle
    names = {
        line.split("{")[0].split(" ")[0]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert all(n.startswith("fronde_") for n in names), sorted(
        n for n in names if "fronde_" not in n
    )


def test_liveness_answers_without_a_key_and_without_backends(
    fake_binary: Path, tmp_path: Path
) -> None:
    with make_client(fake_binary, tmp_path, server={"api_keys": ["k"]}) as c:
        # Before any backend is ready /health may be 503; liveness is 200 at once.
        r = c.get("/health/live")
        assert (r.status_code, r.json()) == (200, {"status": "ok"})
