"""The live view of the router: request lifecycle, ``/fronde/v1/events`` and ``/ui``.

Over fake backends. The page itself runs in headless Chromium (Debian's ``chromium``,
driven by Playwright), as in the browser test against the real model in
tests/integration/test_live_real.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Browser, expect

from fronde.modes import Mode
from fronde.router.classify import RequestClass
from fronde.router.engine import Router
from fronde.router.plan import Route

from .test_contract import chat, make_client, ready, real_serve, sse_events


def test_a_decision_runs_counts_its_events_and_ends_once() -> None:
    r = Router()
    v0 = r.version
    d = r.plan(RequestClass.GENERAL, "k", [Mode.BASELINE], forced=Mode.BASELINE, now=10.0)
    assert (d.rid, d.status, r.version) == ("r1", "waiting", v0 + 1)
    r.begin(d, queued_ms=3.5)  # it got its backend and decode slot
    assert (d.status, d.queued_ms) == ("running", 3.5)
    assert d.live_tok_s() is None  # no event yet
    r.progress(d, now=11.0)
    assert d.live_tok_s() is None  # one event gives no rate
    for i in range(1, 5):
        r.progress(d, now=11.0 + 0.5 * i)
    assert d.live_tok_s() == pytest.approx(4 / 2.0)  # 4 intervals in 2 s
    r.finish(d, "done", now=14.0)
    r.finish(d, "error", "late", now=15.0)  # the first ending stands
    row = d.as_dict(now=99.0)
    got = (row["status"], row["error"], row["elapsed_s"], row["streamed"])
    assert got == ("done", None, 4.0, 5)
    assert r.plan(RequestClass.GENERAL, "k2", [Mode.BASELINE], now=20.0).rid == "r2"


@pytest.fixture(scope="module")
def fakes(fake_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    with make_client(fake_binary, tmp_path_factory.mktemp("live")) as c:
        yield ready(c)


def last_row(c: TestClient) -> dict[str, Any]:
    row: dict[str, Any] = c.get("/fronde/v1/router").json()["recent"][-1]
    return row


def test_a_plain_answer_is_done_with_its_timings_and_overhead(fakes: TestClient) -> None:
    r = fakes.post("/v1/chat/completions", json=chat(model="fronde:ngram-simple", max_tokens=20))
    assert r.status_code == 200
    row = last_row(fakes)
    assert (row["status"], row["mode"], row["class"], row["tokens"]) == (
        "done",
        "ngram-simple",
        "forced",
        20,
    )
    assert row["decode_tok_s"] == pytest.approx(500.0)  # the fake's default --fake-tps
    assert 0.0 <= row["overhead_ms"] < 200.0
    assert row["queued_ms"] >= 0.0


def test_a_stream_counts_its_events_and_ends_done(fakes: TestClient) -> None:
    events = sse_events(fakes, chat(model="fronde:baseline", max_tokens=12))
    assert events[-1] == "[DONE]"
    row = last_row(fakes)
    assert row["status"] == "done"
    assert row["streamed"] == len(events) - 1  # every data event but [DONE]
    assert row["live_tok_s"] is not None


def test_a_broken_stream_ends_as_error(fake_binary: Path, tmp_path: Path) -> None:
    knobs = {Mode.BASELINE: ["--fake-garbage"]}
    with make_client(fake_binary, tmp_path, knobs) as c:
        ready(c)
        events = sse_events(c, chat(model="fronde:baseline", max_tokens=8))
        assert "[DONE]" not in events
        assert last_row(c)["status"] == "error"


def test_a_refused_request_ends_as_error_with_the_reason(fake_binary: Path, tmp_path: Path) -> None:
    with make_client(fake_binary, tmp_path, {Mode.BASELINE: ["--fake-ctx", "8"]}) as c:
        ready(c)
        long = chat("word " * 50, model="fronde:baseline", max_tokens=8)
        assert c.post("/v1/chat/completions", json=long).status_code == 400
        row = last_row(c)
        assert row["status"] == "error"
        assert "context" in row["error"]


def test_the_page_is_plain_html_that_reads_the_event_stream(fakes: TestClient) -> None:
    r = fakes.get("/ui")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "<title>Fronde — live routing</title>" in page
    assert 'fetch("/fronde/v1/events"' in page
    assert "<script src=" not in page  # nothing to fetch or build


def test_the_page_names_every_route_in_user_words(fakes: TestClient) -> None:
    page = fakes.get("/ui").text
    legend = page[page.index("const ROUTES = {") : page.index("};", page.index("const ROUTES"))]
    for route in Route:
        assert f'"{route}": [' in legend, route
    assert '"fallback": ["floor (nothing to probe)"' in legend
    for section in ('id="saved"', 'id="classes"', 'id="legend"', "not enough measurements"):
        assert section in page


def test_routed_requests_show_their_class_floor_and_the_time_saved(
    fake_binary: Path, tmp_path: Path
) -> None:
    with make_client(fake_binary, tmp_path) as c:
        ready(c)
        for word in ("alpha", "beta", "gamma"):  # 20-token budgets: no probe, the floor
            r = c.post("/v1/chat/completions", json=chat(f"{word} delta", max_tokens=20))
            assert r.headers["x-fronde-class"] == "fallback"
        c.post("/v1/chat/completions", json=chat(model="fronde:baseline", max_tokens=20))
        state = c.get("/fronde/v1/router").json()
    floor = state["recent"][0]["mode"]
    assert state["recent"][0]["class_floor"] == floor
    general = state["classes"]["general"]
    assert (general["floor"], general["served"]["requests"]) == (floor, 3)  # forced: not
    assert general["measured"][floor]["state"] == "trusted"
    assert general["measured"][floor]["median_tok_s"] == 500.0  # the fakes' speed
    # Served by the floor alone: nothing saved or lost against it, whatever the noise;
    # against baseline, unmeasured in this class, no figure.
    assert state["saved"]["floor"]["saved_s"] == 0.0
    assert state["saved"]["baseline"]["saved_s"] is None
    assert state["saved"]["baseline"]["missing"] == {
        "general": "baseline has 0 of 3 fresh samples in class general"
    }
    assert state["modes"][floor]["speed"]["state"] == "trusted"
    assert "baseline" not in state["modes"]  # forced: it fed no measurement


def test_the_start_page_says_what_this_is_and_links_the_rest(fakes: TestClient) -> None:
    r = fakes.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<code>http://testserver/v1</code>" in r.text  # the base URL for an SDK
    for link in ('href="/ui"', 'href="/v1/models"', 'href="/health"'):
        assert link in r.text


def test_with_api_keys_the_page_is_open_but_its_data_is_not(
    fake_binary: Path, tmp_path: Path
) -> None:
    with make_client(fake_binary, tmp_path, server={"api_keys": ["k1"]}) as c:
        assert c.get("/ui").status_code == 200
        assert c.get("/").status_code == 200
        assert c.get("/fronde/v1/events").status_code == 401


def read_states(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The ``state`` events of ``/fronde/v1/events``, parsed, as they arrive."""
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[6:])


def test_the_event_stream_shows_a_request_while_it_runs_then_done(
    tmp_path: Path, fake_binary: Path
) -> None:
    slow = {"backend": {"extra_args": ["--fake-tps", "25"]}}
    with real_serve(tmp_path, fake_binary, **slow) as s:
        body = {"prompt": "a b c", "max_tokens": 50, "stream": True, "model": "fronde:ngram-mod"}

        def request() -> None:
            with httpx.stream("POST", f"{s.base}/v1/completions", json=body, timeout=30) as r:
                r.read()

        seen: list[tuple[str, int]] = []
        with httpx.stream("GET", f"{s.base}/fronde/v1/events", timeout=30) as ev:
            states = read_states(ev.iter_lines())
            first = next(states)
            assert first["router"]["recent"] == []
            assert set(first["backends"]) >= {"baseline", "ngram-mod"}
            t = threading.Thread(target=request)
            t.start()
            for state in states:
                rows = state["router"]["recent"]
                if rows:
                    seen.append((rows[-1]["status"], rows[-1]["streamed"]))
                    if rows[-1]["status"] in ("done", "error", "cancelled"):
                        break
            t.join()
        running = [n for status, n in seen if status == "running"]
        # 50 tokens at 25 tok/s take 2 s: several throttled updates show it running
        # with a growing count before the final state says done.
        assert len(running) >= 3, seen
        assert running == sorted(running) and running[-1] > running[0]
        assert seen[-1][0] == "done"
        assert seen[-1][1] > 50  # 50 token events, the final event and the usage-free end


# --- the page in a browser ---------------------------------------------------------

CANDIDATES = "the first ready of ngram-mod, cascade, ngram-simple"  # router.aggressive


@pytest.mark.parametrize(
    ("router", "probe_words"),
    [
        (
            {"probe_min_tokens": 300},  # probe = "auto", the default
            "probes (auto): only when the budget is open or ≥ 300 tokens and the candidate"
            f" is unmeasured in the class — 48 tokens on {CANDIDATES}",
        ),
        ({"probe": "never"}, "probes: never"),
        (
            {"probe": "always", "probe_tokens": 32},
            "probes (always): whenever the candidate is not the class's floor"
            f" — 32 tokens on {CANDIDATES}",
        ),
    ],
)
def test_the_page_states_the_probe_policy_and_fits_a_1280_px_window(
    tmp_path: Path, fake_binary: Path, browser: Browser, router: dict[str, Any], probe_words: str
) -> None:
    with real_serve(tmp_path, fake_binary, router=router) as s:
        edit = "Rename x to y in this code:\n```python\n" + "x = x + 1\n" * 90 + "```"
        for body in (
            chat("alpha beta gamma", max_tokens=20),
            chat(edit, max_tokens=20),
            chat("alpha beta gamma", max_tokens=20, logprobs=True),
            chat("alpha beta gamma", model="fronde:baseline", max_tokens=20),
        ):
            assert httpx.post(f"{s.base}/v1/chat/completions", json=body, timeout=30).is_success
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{s.base}/ui")
        expect(page.locator("#conn")).to_have_class("live", timeout=10_000)
        # Probes are the exception: the header says when they run, from the router's state.
        expect(page.locator("#policy")).to_have_text(
            f"model fronde · {probe_words} · margin 1.1× · edits → ngram-mod"
        )
        expect(page.locator("#class-rows tr")).to_have_count(3)  # general, edit, unsafe
        expect(page.locator("#requests tr")).to_have_count(4)
        # Every column shows: neither the page nor a table's own box scrolls sideways.
        widths = page.evaluate(
            """() => [["page", document.documentElement.scrollWidth, window.innerWidth],
              ...[...document.querySelectorAll(".wide")].map(
                (box) => [box.firstElementChild.id, box.scrollWidth, box.clientWidth])]"""
        )
        page.close()
    for name, needed, shown in widths:
        assert needed <= shown, f"{name} needs {needed} px, shows {shown}"
    assert [w[0] for w in widths] == ["page", "classes", "recent"]
