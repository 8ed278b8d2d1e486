"""Swap residency and the batch API through the app, over fake llama-server processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from fronde.api.ui import state_event
from fronde.modes import Mode

from .test_contract import chat, make_client, real_serve

SWAP: dict[str, Any] = {"residency": "swap", "swap": {"max_resident": 1, "max_wait_s": 10.0}}


def swap_state(c: TestClient) -> dict[str, Any]:
    state: dict[str, Any] = c.get("/fronde/v1/router").json()["swap"]
    return state


def wait_resident(c: TestClient) -> None:
    for _ in range(400):
        if swap_state(c)["resident"] and c.get("/health").status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError(swap_state(c))


def test_only_one_backend_is_up_and_a_request_swaps_it(fake_binary: Path, tmp_path: Path) -> None:
    with make_client(fake_binary, tmp_path, **SWAP) as c:
        wait_resident(c)
        states = {m: b["state"] for m, b in c.get("/health").json()["backends"].items()}
        assert states["baseline"] == "ready"
        assert states["ngram-simple"] == states["ngram-mod"] == "stopped"
        r = c.post("/v1/chat/completions", json=chat(model="fronde:ngram-mod", max_tokens=8))
        assert r.status_code == 200, r.text
        assert r.headers["x-fronde-mode"] == "ngram-mod"
        assert int(r.headers["x-fronde-swap-wait-ms"]) > 0  # it waited for the swap
        s = swap_state(c)
        assert (s["resident"], s["swaps"], s["history"][-1]["from"]) == (
            ["ngram-mod"],
            1,
            "baseline",
        )
        states = {m: b["state"] for m, b in c.get("/health").json()["backends"].items()}
        assert (states["baseline"], states["ngram-mod"]) == ("stopped", "ready")
        app = cast("FastAPI", c.app)
        event = json.loads(state_event(app.state.runtime).split(b"data: ", 1)[1])
        assert event["swap"]["resident"] == ["ngram-mod"]  # the live page shows residency
        metrics = c.get("/metrics").text
        assert (
            'fronde_swaps_total{from_mode="baseline",outcome="ok",to_mode="ngram-mod"} 1.0'
            in metrics
        )
        assert "fronde_swap_seconds_count 1.0" in metrics
        assert 'fronde_swap_queue_depth{mode="ngram-mod"} 0.0' in metrics


def test_a_failed_swap_falls_back_to_the_resident_mode(fake_binary: Path, tmp_path: Path) -> None:
    knobs = {Mode.NGRAM_MOD: ["--fake-exit-on-start", "3"]}
    with make_client(fake_binary, tmp_path, knobs, **SWAP) as c:
        wait_resident(c)
        r = c.post("/v1/chat/completions", json=chat(model="fronde:ngram-mod", max_tokens=8))
        assert r.status_code == 200, r.text
        assert (r.headers["x-fronde-mode"], r.headers["x-fronde-swap-fallback"]) == (
            "baseline",
            "ngram-mod",
        )
        s = swap_state(c)
        assert s["resident"] == ["baseline"]  # started again after ngram-mod failed
        assert (s["swap_failures"], s["fallbacks"]) == (1, 1)


def test_without_fallback_a_failed_swap_is_a_503_with_retry_after(
    fake_binary: Path, tmp_path: Path
) -> None:
    knobs = {Mode.NGRAM_MOD: ["--fake-exit-on-start", "3"]}
    settings = {"residency": "swap", "swap": {"fallback": False}}
    with make_client(fake_binary, tmp_path, knobs, **settings) as c:
        wait_resident(c)
        r = c.post("/v1/chat/completions", json=chat(model="fronde:ngram-mod", max_tokens=8))
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "mode_not_resident"
        assert "retry-after" in r.headers


def test_a_batch_is_grouped_by_mode_with_one_swap_per_group(
    fake_binary: Path, tmp_path: Path
) -> None:
    order = ["ngram-mod", "baseline", "ngram-simple", "ngram-mod", "baseline", "ngram-simple"]
    items: list[Any] = [
        {"prompt": f"p{i} a b", "max_tokens": 4, "model": f"fronde:{m}"}
        for i, m in enumerate(order)
    ]
    items.insert(3, {"prompt": 7})  # a bad item: answered in its place, the rest run
    with make_client(fake_binary, tmp_path, **SWAP) as c:
        wait_resident(c)
        r = c.post("/fronde/v1/batch", json={"requests": items})
        assert r.status_code == 200, r.text
        out = r.json()
        assert [row["index"] for row in out["data"]] == list(range(7))
        assert [row["mode"] for row in out["data"]] == [*order[:3], None, *order[3:]]
        assert out["data"][3]["status"] == 400
        assert out["data"][3]["body"]["error"]["param"] == "prompt"
        for row in out["data"]:
            if row["status"] == 200:
                assert row["body"]["choices"][0]["text"]
        # The resident mode's group first, then one swap per other group.
        assert [g["mode"] for g in out["groups"]] == ["baseline", "ngram-mod", "ngram-simple"]
        assert swap_state(c)["swaps"] == 2  # per request it would be 5


def test_a_batch_without_a_list_is_a_400(fake_binary: Path, tmp_path: Path) -> None:
    with make_client(fake_binary, tmp_path) as c:
        r = c.post("/fronde/v1/batch", json={"prompts": []})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "requests"


@pytest.mark.parametrize("bad", ["not json\n", ""])
def test_fronde_batch_refuses_a_bad_file_in_one_line(tmp_path: Path, bad: str) -> None:
    f = tmp_path / "in.jsonl"
    f.write_text(bad)
    out = subprocess.run(
        [sys.executable, "-m", "fronde", "batch", str(f), "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("fronde: error: ")


def test_fronde_batch_prints_one_result_per_line_in_order(
    tmp_path: Path, fake_binary: Path
) -> None:
    f = tmp_path / "in.jsonl"
    bodies = [
        {"messages": [{"role": "user", "content": "x y"}], "max_tokens": 3},
        {"prompt": "a b", "max_tokens": 3, "model": "fronde:ngram-mod"},
        {"prompt": "c d", "max_tokens": 3},
    ]
    f.write_text("\n".join(json.dumps(b) for b in bodies) + "\n")
    with real_serve(tmp_path, fake_binary, residency="swap") as s:
        out = subprocess.run(
            [sys.executable, "-m", "fronde", "batch", str(f), "--url", s.base],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["index"], r["status"]) for r in rows] == [(0, 200), (1, 200), (2, 200)]
    assert rows[0]["body"]["object"] == "chat.completion"
    # Novel routed requests go to the probe's mode (ngram-mod), like the forced one:
    # one group, one swap.
    assert [r["mode"] for r in rows] == ["ngram-mod"] * 3
    assert out.stderr.startswith("batch: 3 requests, 0 refused; groups in order: ngram-mod ×3 (")
