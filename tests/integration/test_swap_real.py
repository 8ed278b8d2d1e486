"""One real swap between two gemma llama-servers (swap residency, one resident)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from ..procs import alive
from .conftest import start_serve

pytestmark = pytest.mark.integration


def test_a_request_for_another_mode_swaps_the_llama_server(tmp_path: Path) -> None:
    env = {
        "FRONDE_RESIDENCY": "swap",
        "FRONDE_SWAP__MAX_RESIDENT": "1",
        "FRONDE_MODES": '["baseline","ngram-mod"]',
    }
    serve = start_serve(tmp_path, env=env)
    try:
        health = serve.health()
        assert health["backends"]["baseline"]["state"] == "ready"
        assert health["backends"]["ngram-mod"]["state"] == "stopped"
        first_pid = health["backends"]["baseline"]["pid"]
        body = {"prompt": "def add(a, b):\n", "max_tokens": 16, "temperature": 0}
        t0 = time.monotonic()
        r = httpx.post(
            f"{serve.base_url}/v1/completions",
            json={**body, "model": "fronde:ngram-mod"},
            timeout=300,
        )
        took = time.monotonic() - t0
        assert r.status_code == 200, r.text
        assert r.headers["x-fronde-mode"] == "ngram-mod"
        waited_s = int(r.headers["x-fronde-swap-wait-ms"]) / 1000
        assert 0.1 < waited_s < took
        assert r.json()["choices"][0]["text"]
        state = httpx.get(f"{serve.base_url}/fronde/v1/router", timeout=10).json()["swap"]
        assert (state["resident"], state["swaps"]) == (["ngram-mod"], 1)
        swap = state["history"][-1]
        assert (swap["from"], swap["to"], swap["ok"]) == ("baseline", "ngram-mod", True)
        print(f"real swap baseline → ngram-mod: {swap}")  # for the CI log
        assert not alive(first_pid)  # the baseline llama-server was stopped, not left behind
        health = serve.health()
        assert health["status"] == "ok"
        assert health["backends"]["baseline"]["state"] == "stopped"
        # And back: a baseline request swaps again (a routed one would stay: its probe
        # mode, ngram-mod, is resident).
        r = httpx.post(
            f"{serve.base_url}/v1/completions",
            json={**body, "model": "fronde:baseline"},
            timeout=300,
        )
        assert r.status_code == 200
        state = httpx.get(f"{serve.base_url}/fronde/v1/router", timeout=10).json()["swap"]
        assert state["swaps"] == 2
        metrics = httpx.get(f"{serve.base_url}/metrics", timeout=10).text
        assert "fronde_swap_seconds_count 2.0" in metrics
    finally:
        serve.stop(signal.SIGTERM)
