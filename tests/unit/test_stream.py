"""The client-side stream reader used by the benchmarks and the demo."""

from __future__ import annotations

import json

import httpx
import pytest

from fronde.bench.stream import StreamedCompletion, collect_completion, stream_completion
from fronde.errors import FrondeError


def sse(*events: object) -> bytes:
    out = b""
    for e in events:
        out += b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
    return out


def client_for(body: bytes, status: int = 200) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"x-fronde-mode": "ngram-mod"})

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_collects_text_timings_and_alpha() -> None:
    timings = {"predicted_n": 3, "predicted_per_second": 50.0, "draft_n": 8, "draft_n_accepted": 6}
    body = sse(
        {"choices": [{"text": "a"}]},
        {"choices": [{"text": "b"}]},
        {"choices": [{"text": "c"}]},
        {"choices": [{"text": ""}], "timings": timings},
        b"[DONE]",
    )
    r = collect_completion(client_for(body), "http://x/v1/completions", {"stream": True})
    assert (r.text, r.chunks, r.mode) == ("abc", 3, "ngram-mod")
    assert r.alpha() == 0.75
    assert r.first is not None and r.last is not None and r.last >= r.first


def test_client_rate_is_tokens_after_the_first_over_the_span() -> None:
    s = StreamedCompletion(mode=None, t_start=0.0, first=1.0, last=3.0, chunks=5)
    assert s.client_tok_s() == 2.0  # (5 - 1) / 2 s, from the chunk count
    s.timings = {"predicted_n": 9}
    assert s.client_tok_s() == 4.0  # llama-server's token count wins over chunks
    assert StreamedCompletion(mode=None, t_start=0.0, first=1.0, last=1.0).client_tok_s() == 0.0


def test_yields_after_every_event() -> None:
    body = sse({"choices": [{"text": "a"}]}, {"choices": [{"text": "b"}]}, b"[DONE]")
    seen = [s.text for s in stream_completion(client_for(body), "http://x", {})]
    assert seen == ["a", "ab"]


def test_error_event_and_bad_status_raise() -> None:
    with pytest.raises(FrondeError, match="streamed an error"):
        collect_completion(client_for(sse({"error": {"message": "boom"}})), "http://x", {})
    with pytest.raises(FrondeError, match="answered 503"):
        collect_completion(client_for(b"{}", 503), "http://x", {})
    with pytest.raises(FrondeError, match="without text or timings"):
        collect_completion(client_for(sse(b"[DONE]")), "http://x", {})
