"""Two Fronde replicas on real parts, sharing one redis-server.

Replica A runs the llama-servers (gemma-3-270m); replica B runs none and reaches
A's through ``[remote]``. They share router state in Redis: a prompt routed on A is
a cache hit on B, and killing Redis leaves both serving.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest

from fronde.backends.process import free_port

from ..unit.test_shared import redis_server, router, wait_for
from .conftest import ORIGINAL_POLICY, start_serve

pytestmark = pytest.mark.integration


def test_two_replicas_share_routes_and_survive_losing_redis(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    port = free_port()
    redis = redis_server(port)
    shared = {
        "FRONDE_SHARED__REDIS_URL": f"redis://127.0.0.1:{port}/0",
        "FRONDE_SHARED__SYNC_S": "0.2",
        **ORIGINAL_POLICY,
    }
    modes = '["baseline","ngram-simple","ngram-mod"]'
    a = start_serve(tmp_path / "a", env={**shared, "FRONDE_MODES": modes})
    b = None
    try:
        urls = {m: [v["url"]] for m, v in a.health()["backends"].items() if v.get("url")}
        b = start_serve(
            tmp_path / "b", env={**shared, "FRONDE_MODES": modes, "FRONDE_REMOTE": json.dumps(urls)}
        )
        assert all(
            "replicas" in v for v in b.health()["backends"].values() if v.get("state") != "left-out"
        )
        body = {"prompt": "def fibonacci(n):\n", "max_tokens": 60, "temperature": 0}
        first = httpx.post(f"{a.base_url}/v1/completions", json=body, timeout=300)
        assert first.status_code == 200
        assert first.headers["x-fronde-class"] == "probe"
        again = httpx.post(f"{b.base_url}/v1/completions", json=body, timeout=300)
        assert again.status_code == 200
        assert again.headers["x-fronde-class"] == "cache"
        assert again.headers["x-fronde-mode"] == first.json()["fronde"]["mode"]

        redis.send_signal(signal.SIGKILL)
        redis.wait()
        wait_for(lambda: not router(a.base_url)["shared"]["healthy"], 10)
        wait_for(lambda: not router(b.base_url)["shared"]["healthy"], 10)
        for serve in (a, b):
            r = httpx.post(
                f"{serve.base_url}/v1/completions",
                json={**body, "prompt": "class Stack:\n"},
                timeout=300,
            )
            assert r.status_code == 200
    finally:
        if redis.poll() is None:
            redis.kill()
        for serve in (b, a):
            if serve is not None:
                serve.stop(signal.SIGTERM)
    log_a = a.log.read_text()
    assert '"event": "shared_state.lost"' in log_a
    assert '"event": "request.finished"' in log_a
