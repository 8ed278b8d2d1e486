"""The counterfactual book on real parts: llama-server b11434 and gemma-3-270m.

Every answered request is replayed for every n-gram mode from its token ids, which
Fronde fetches from the backend after the answer; the served mode's replay must
reproduce what its real server did, or the predictions that route later requests
mean nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import start_serve

pytestmark = pytest.mark.integration

# Completion-style text a base model continues by copying: n-gram drafts pay off.
BLOCK = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n"


def _state(http: httpx.Client) -> dict[str, Any]:
    return http.get("/fronde/v1/router").json()


def test_replayed_answers_match_their_server_and_route_later_ones(tmp_path: Path) -> None:
    serve = start_serve(
        tmp_path, "--mode", "baseline", "--mode", "ngram-simple", "--mode", "ngram-mod"
    )
    try:
        with httpx.Client(base_url=serve.base_url, timeout=120) as http:
            classes: list[str] = []
            for i in range(3):
                body = {
                    "prompt": f"# module {i}\n" + BLOCK * 3,
                    "max_tokens": 64,
                    "temperature": 0,
                }
                r = http.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text
                classes.append(r.headers["x-fronde-class"])
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # the replay runs after the answer
                    book = _state(http)["counterfactual"]
                    if sum(b["samples"] for b in book["buckets"].values()) > i:
                        break
                    time.sleep(0.1)
                else:
                    raise AssertionError(f"answer {i} was never replayed: {_state(http)}")
            state = _state(http)
    finally:
        serve.stop()
    book = state["counterfactual"]
    [(bucket, entry)] = book["buckets"].items()
    assert bucket == "general|high" and entry["samples"] == 3
    # The served mode's replay against its real decode time, before calibration.
    assert book["median_error"]["replay"] < 0.25, book
    # Copying text: the replay predicts n-gram modes well above plain decoding.
    assert entry["speedup"]["ngram-simple"] > 1.2, entry
    assert classes[:2] == ["fallback", "fallback"] and classes[2] == "predicted", classes
    last = state["recent"][-1]
    assert last["predicted_tok_s"] is not None and last["counterfactual"]


def test_a_baseline_with_flags_of_its_own_gets_its_pass_timed_before_routing(
    tmp_path: Path,
) -> None:
    # --slot-prompt-similarity at its default: a flag for the baseline backend only
    # (backend.plain_args) that changes nothing; Fronde then times one pass of each backend
    # on real timings.
    serve = start_serve(
        tmp_path,
        "--mode",
        "baseline",
        "--mode",
        "ngram-mod",
        env={"FRONDE_BACKEND__PLAIN_ARGS": '["--slot-prompt-similarity", "0.1"]'},
    )
    try:
        with httpx.Client(base_url=serve.base_url, timeout=120) as http:
            deadline = time.monotonic() + 120
            steps: dict[str, float] = {}
            while time.monotonic() < deadline and len(steps) < 2:
                steps = _state(http)["counterfactual"]["pass_ms"]
                time.sleep(0.5)
            assert set(steps) == {"baseline", "ngram-mod"}, serve.log.read_text()[-2000:]
            # gemma-3-270m on a CPU: a pass takes milliseconds to tens of them, not seconds.
            assert all(0.5 < v < 1000 for v in steps.values()), steps
            # The flag changes nothing: the two passes agree within noise. A
            # timed text the server had just seen was drafted from ngram-mod's memory
            # and read 2.5× longer (52.6 against 21.4 ms) before the two prompts.
            assert 0.5 < steps["ngram-mod"] / steps["baseline"] < 2.0, steps
            backends = serve.health()["backends"]
            argv = {
                mode: Path(f"/proc/{b['pid']}/cmdline").read_bytes().split(b"\0")
                for mode, b in backends.items()
                if b.get("pid")
            }
            assert b"--slot-prompt-similarity" in argv["baseline"]
            assert b"--slot-prompt-similarity" not in argv["ngram-mod"]
            # Fronde's own flag goes to every server it starts.
            assert all(b"--no-cache-idle-slots" in a for a in argv.values())
    finally:
        serve.stop()
