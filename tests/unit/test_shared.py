"""Two Fronde replicas share router state through a real redis-server (Debian's).

The replicas are real `fronde serve` processes over fake backends; Redis is started
by the test on a free port, killed, and started again.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from fronde.backends.process import free_port

from .test_contract import ORIGINAL_ROUTER, chat, real_serve


def redis_server(port: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("this test needs Debian's redis-server: `apt-get install redis-server`")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


@pytest.fixture
def redis_port() -> Iterator[int]:
    port = free_port()
    proc = redis_server(port)
    yield port
    proc.kill()
    proc.wait()


def router(base: str) -> dict[str, Any]:
    state: dict[str, Any] = httpx.get(f"{base}/fronde/v1/router", timeout=5).json()
    return state


def wait_for(check: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_replicas_learn_together_and_survive_losing_redis(
    tmp_path: Path, fake_binary: Path, redis_port: int
) -> None:
    shared = {
        "shared": {"redis_url": f"redis://127.0.0.1:{redis_port}/0", "sync_s": 0.2},
        "router": ORIGINAL_ROUTER,  # A's first request probes, so it has a decision to share
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        real_serve(tmp_path / "a", fake_binary, **shared) as a,
        real_serve(tmp_path / "b", fake_binary, **shared) as b,
    ):
        body = chat("a prompt only replica A has seen", max_tokens=60)
        first = httpx.post(f"{a.base}/v1/chat/completions", json=body, timeout=30)
        assert first.headers["x-fronde-class"] == "probe"
        winner = first.json()["fronde"]["mode"]
        # Replica B has never seen it: Redis gives it A's decision.
        again = httpx.post(f"{b.base}/v1/chat/completions", json=body, timeout=30)
        assert again.status_code == 200
        assert (again.headers["x-fronde-class"], again.headers["x-fronde-mode"]) == (
            "cache",
            winner,
        )
        # A's measurements reach B's EMAs within a sync period.
        wait_for(lambda: router(b.base)["modes"].get("ngram-mod", {}).get("samples", 0) > 0)
        assert router(a.base)["shared"]["healthy"] is True

        # Redis dies: both replicas keep serving on local state.
        subprocess.run(["pkill", "-f", f"redis-server 127.0.0.1:{redis_port}"], check=False)
        wait_for(lambda: not router(a.base)["shared"]["healthy"])
        wait_for(lambda: not router(b.base)["shared"]["healthy"])
        for base in (a.base, b.base):
            r = httpx.post(f"{base}/v1/chat/completions", json=chat("after redis"), timeout=30)
            assert r.status_code == 200
            repeat = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
            assert repeat.status_code == 200
            assert repeat.headers["x-fronde-class"] == "cache"  # the local cache still has it

        # Redis comes back: the replicas reconnect on their own.
        proc = redis_server(redis_port)
        try:
            wait_for(lambda: router(a.base)["shared"]["healthy"])
            wait_for(lambda: router(b.base)["shared"]["healthy"])
            # And the first write after the restart is shared, not dropped on a dead
            # pooled connection (a trial saw that before writes were retried).
            # The restarted Redis is empty; one routed request on A writes its EMAs.
            fresh = chat("a prompt sent after redis came back", max_tokens=60)
            assert httpx.post(f"{a.base}/v1/chat/completions", json=fresh, timeout=30).is_success
            client = redis.Redis(port=redis_port, decode_responses=True)
            wait_for(lambda: client.hlen("fronde:ema") > 0)
            assert router(a.base)["shared"]["healthy"] is True
            client.close()
            # Read now: killing this Redis below, before the replicas stop, may log
            # another (legitimate) "lost".
            logs = (tmp_path / "a" / "serve.log").read_text()
            assert logs.count('"event": "shared_state.lost"') == 1  # not again on reconnect
            assert '"event": "shared_state.restored"' in logs
        finally:
            proc.kill()
            proc.wait()
