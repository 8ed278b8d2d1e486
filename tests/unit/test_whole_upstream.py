"""A whole answer is asked of llama-server whole where it stops for a gone client (patch
0010), and assembled from its stream elsewhere; the client reads the same answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.modes import Mode

from .test_contract import MODES, chat, real_serve
from .test_correctness import WORDS, freed_within, leave_after
from .test_held_stop import generation_bodies


def _served(serve: Any, tmp_path: Path, whole: bool) -> tuple[Any, list[Path]]:
    tmp_path.mkdir(exist_ok=True)
    records = [tmp_path / f"{m}.jsonl" for m in MODES]
    knobs: dict[Mode, list[str]] = {
        m: ["--fake-record", str(r), *(["--fake-whole-stops"] if whole else [])]
        for m, r in zip(MODES, records, strict=True)
    }
    return serve(knobs), records


def _text(answer: dict[str, Any]) -> tuple[str, str]:
    choice: dict[str, Any] = answer["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    return text, choice["finish_reason"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("stop", [None, ["gamma x"]], ids=["plain", "stop"])
def test_a_whole_answer_goes_whole_only_to_a_server_that_stops_it_for_a_gone_client(
    serve: Any, tmp_path: Path, path: str, stop: list[str] | None
) -> None:
    """The same text, usage and timings on either server; upstream one non-streamed request
    with the client's own fields (``stop`` kept, no ``stream_options``) on the patched
    server, a stream on the stock one."""
    answers: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []
    for whole in (True, False):
        c, records = _served(serve, tmp_path / str(whole), whole)
        body: dict[str, Any] = {"max_tokens": 3, "model": "fronde:baseline"}
        body |= {"stop": stop} if stop else {}
        body |= {"messages": [{"role": "user", "content": WORDS}]} if "chat" in path else {}
        body |= {} if "chat" in path else {"prompt": WORDS}
        r = c.post(path, json=body)
        assert r.status_code == 200, r.text
        answers.append(r.json())
        (one,) = generation_bodies(records)
        sent.append(one)
    assert _text(answers[0]) == _text(answers[1]) == ("alpha beta gamma ", "length")
    assert answers[0]["usage"]["completion_tokens"] == answers[1]["usage"]["completion_tokens"]
    assert answers[0]["timings"]["predicted_n"] == answers[1]["timings"]["predicted_n"] == 3
    patched, stock = sent
    assert patched["stream"] is False and "stream_options" not in patched
    assert stock["stream"] is True
    assert ("stop" in patched) is bool(stop)


def test_the_router_learns_from_a_whole_answer_asked_whole(serve: Any, tmp_path: Path) -> None:
    c, _ = _served(serve, tmp_path, whole=True)
    r = c.post("/v1/chat/completions", json=chat(WORDS, max_tokens=5, model="fronde:baseline"))
    assert r.status_code == 200, r.text
    (row,) = c.get("/fronde/v1/router").json()["recent"]
    assert row["status"] == "done"
    assert row["mode"] == "baseline"
    assert row["tokens"] == 5
    assert row["decode_tok_s"] is not None  # from the answer's own timings


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": [WORDS, "beta gamma"], "max_tokens": 2, "model": "fronde:baseline"},
        {"prompt": WORDS, "n": 2, "max_tokens": 2, "model": "fronde:baseline"},
    ],
    ids=["two-prompts", "n2"],
)
def test_several_choices_stay_streamed_upstream(
    serve: Any, tmp_path: Path, body: dict[str, Any]
) -> None:
    """llama-server joins several prompts' whole answers with the first one's usage only:
    such a request is assembled from the stream, its usage summed."""
    c, records = _served(serve, tmp_path, whole=True)
    r = c.post("/v1/completions", json=body)
    if r.status_code == 200:
        assert all(b["stream"] is True for b in generation_bodies(records))
    else:  # a field Fronde refuses is refused on either server
        assert r.status_code == 400, r.text


@pytest.fixture
def slow_whole(tmp_path: Path, fake_binary: Path) -> Iterator[str]:
    """`fronde serve` over patched fakes decoding 20 tok/s; yields its base URL."""
    extra = ["--fake-tps", "20", "--fake-whole-stops"]
    with real_serve(tmp_path, fake_binary, backend={"extra_args": extra}) as s:
        yield s.base


def test_a_client_that_leaves_a_whole_answer_asked_whole_frees_the_slot(slow_whole: str) -> None:
    body = chat(WORDS, max_tokens=400, model="fronde:ngram-mod")
    leave_after(slow_whole, "/v1/chat/completions", body, 1.0)
    assert freed_within(slow_whole, ["baseline", "ngram-mod"], 1.0)
    rows = httpx.get(f"{slow_whole}/fronde/v1/router").json()["recent"]
    assert rows[-1]["status"] == "cancelled"
