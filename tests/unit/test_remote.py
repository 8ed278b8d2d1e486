"""Remote backends: replicas on other hosts, least-in-flight balancing, health hysteresis."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends.pool import BackendPool, PoolPlan
from fronde.backends.process import LaunchSpec, free_port
from fronde.backends.remote import DOWN_AFTER, UP_AFTER, Replica
from fronde.config import load_settings
from fronde.modes import Mode


def test_health_hysteresis_three_failures_down_two_successes_up() -> None:
    r = Replica("http://h:1")
    assert [r.observe(True), r.observe(True)] == [False, True] and r.up  # 2 oks: up
    assert [r.observe(False, "x") for _ in range(DOWN_AFTER - 1)] == [False] * (DOWN_AFTER - 1)
    assert r.up  # two failures are not enough
    assert r.observe(True) is False and r.up  # a success resets the failure count
    assert [r.observe(False, "x") for _ in range(DOWN_AFTER)][-1] is True and not r.up
    assert r.last_error == "x"
    assert [r.observe(True) for _ in range(UP_AFTER)][-1] is True and r.up


def start_fake(
    binary: Path, port: int, log: Path, *knobs: str, health: int = 200
) -> subprocess.Popen[bytes]:
    """A fake llama-server at ``port``, once its /health answers ``health`` (ngram-mod unless
    ``knobs`` name a ``--spec-type``; 503 for one started loading, ``--fake-load-s``)."""
    args = ["--port", str(port), "--alias", "fronde", "--fake-tps", "20"]
    if "--spec-type" not in knobs:
        args += ["--spec-type", "ngram-mod"]
    with log.open("ab") as out:
        proc = subprocess.Popen([str(binary), *args, *knobs], stdout=out, stderr=out)
    for _ in range(200):
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == health:
                return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("fake replica did not start")


def predicted(port: int) -> int:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    line = next(ln for ln in text.splitlines() if ln.startswith("llamacpp:tokens_predicted_total"))
    return int(line.split()[1])


@pytest.fixture
def replicas(
    fake_binary: Path, tmp_path: Path
) -> Iterator[tuple[list[int], list[subprocess.Popen[bytes]]]]:
    ports = [free_port(), free_port()]
    procs = [start_fake(fake_binary, p, tmp_path / f"r{p}.log") for p in ports]
    yield ports, procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_remote_replicas_share_the_load_and_one_can_die_and_return(
    fake_binary: Path,
    tmp_path: Path,
    replicas: tuple[list[int], list[subprocess.Popen[bytes]]],
) -> None:
    ports, procs = replicas
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    local = {Mode.BASELINE: LaunchSpec(Mode.BASELINE, fake_binary, [], tmp_path / "b.log")}
    pool = BackendPool(PoolPlan(local, {}, {Mode.NGRAM_MOD: urls}), stop_grace_s=1.0)
    settings = load_settings(
        cache_dir=tmp_path,
        models_dir=tmp_path,
        modes=["baseline", "ngram-mod"],
        router={"max_parallel_decodes": 4, "load_rule": "off"},
    )
    with TestClient(create_app(settings, pool=pool)) as c:
        for _ in range(200):
            if c.get("/health").json()["backends"]["ngram-mod"]["state"] == "ready":
                break
            time.sleep(0.05)
        status = c.get("/health").json()["backends"]["ngram-mod"]
        assert [r["url"] for r in status["replicas"]] == urls
        body = {"prompt": "a b c", "max_tokens": 30, "model": "fronde:ngram-mod"}

        def one() -> None:
            assert c.post("/v1/completions", json=body).status_code == 200

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.2)  # the second arrives while the first is in flight
        for t in threads:
            t.join()
        assert [predicted(p) for p in ports] == [30, 30]  # one each: least in flight

        # Replica 0 dies: after DOWN_AFTER failed checks it is down, and the mode serves on.
        procs[0].kill()
        procs[0].wait()
        reps: list[dict[str, object]] = []
        for _ in range(100):
            reps = c.get("/health").json()["backends"]["ngram-mod"]["replicas"]
            if not reps[0]["up"]:
                break
            time.sleep(0.1)
        assert reps[0]["up"] is False and reps[1]["up"] is True
        assert reps[0]["error"]
        assert c.post("/v1/completions", json=body).status_code == 200
        assert predicted(ports[1]) == 60

        # It comes back on the same port: two good checks and it takes traffic again.
        proc = start_fake(fake_binary, ports[0], tmp_path / "again.log")
        try:
            for _ in range(100):
                if c.get("/health").json()["backends"]["ngram-mod"]["replicas"][0]["up"]:
                    break
                time.sleep(0.1)
            assert c.get("/health").json()["backends"]["ngram-mod"]["replicas"][0]["up"]
            assert c.post("/v1/completions", json=body).status_code == 200
            assert predicted(ports[0]) == 30  # the tie goes to the first listed
        finally:
            proc.kill()
            proc.wait()
