"""Remote hosts of every mode (``remote.all``): a dropped request goes once to another
host, and a probe's continuation goes back to the probe's host.

Over two fake hosts (tests/fakes, ``--fake-per-request``: a llama-server built with
Fronde's patch set). Where a test counts failed requests against a host's health, the
health checks are stopped once the hosts are up (:func:`no_more_checks`), so that only
the requests move the hysteresis.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends import remote
from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool
from fronde.backends.pool_plan import remote_plan
from fronde.backends.process import free_port
from fronde.backends.remote import DOWN_AFTER, RemoteMode
from fronde.config import load_settings
from fronde.errors import BackendUnavailableError
from fronde.json_types import JSONObject
from fronde.modes import Mode
from fronde.request.admission import Admission
from fronde.request.splice import Splice
from fronde.router.classify import RequestClass
from fronde.router.engine import Decision, Router
from fronde.router.plan import Plan, Route
from fronde.router.policy import RouterPolicy

from ..fakes.fake_llama_server import tokenize
from .test_contract import ready
from .test_remote import start_fake

PER_REQUEST = ("--fake-per-request", "--spec-type", "ngram-simple,ngram-mod")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The fake hosts a test started (killed at its end)."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def host(binary: Path, tmp_path: Path, procs: list[Any], port: int, *knobs: str) -> Path:
    """Start a patched fake host at ``port``; the file its POSTs are recorded in."""
    record = tmp_path / f"h{port}-{len(procs)}.jsonl"
    argv = [*PER_REQUEST, "--fake-record", str(record), *knobs]
    procs.append(start_fake(binary, port, tmp_path / f"h{port}.log", *argv))
    return record


def posts(record: Path, path: str) -> list[dict[str, Any]]:
    """The bodies a fake host received at ``path``, in order."""
    if not record.exists():
        return []
    rows = map(json.loads, record.read_text().splitlines())
    return [r["body"] for r in rows if r["path"] == path]


def segments(record: Path) -> list[dict[str, Any]]:
    """The segments a fake host generated (streamed ``/completion``; the start's check
    sends its own, not streamed)."""
    return [b for b in posts(record, "/completion") if b.get("stream")]


def no_more_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop the hosts' health checks, once each has made the one it was waiting for."""
    every_s = remote.HEALTH_EVERY_S
    monkeypatch.setattr(remote, "HEALTH_EVERY_S", 3600.0)
    time.sleep(every_s + 0.5)


def hosts_of(c: TestClient) -> list[dict[str, Any]]:
    """The hosts as ``/health`` shows them (every mode shows the same)."""
    return c.get("/health").json()["backends"]["ngram-mod"]["replicas"]


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()


def serve(tmp_path: Path, urls: list[str]) -> TestClient:
    """Fronde over the hosts ``urls`` (``remote.all``)."""
    router = {"max_parallel_decodes": 4, "load_rule": "off"}
    settings = load_settings(
        cache_dir=tmp_path, models_dir=tmp_path, remote={"all": urls}, router=router
    )
    return TestClient(create_app(settings))


WHOLE = {"prompt": "a b c", "max_tokens": 8, "model": "fronde:ngram-mod"}
STREAM = {**WHOLE, "stream": True}


def streamed(c: TestClient, body: dict[str, Any]) -> tuple[int, list[str]]:
    """The status of a streamed completion and its ``data:`` payloads."""
    with c.stream("POST", "/v1/completions", json=body) as r:
        return r.status_code, [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]


# --- which replica a call goes to (pure) ---------------------------------------------------


def test_a_call_prefers_the_host_of_its_cache_and_avoids_the_hosts_it_failed_on() -> None:
    hosts = RemoteMode("remote.all", ["http://a:1", "http://b:1", "http://c:1"])
    load = {"http://a:1": 0, "http://b:1": 2, "http://c:1": 1}
    hosts.load = load.__getitem__
    for r in hosts.replicas:
        r.up = True
    a, b, c = (r.url for r in hosts.replicas)
    assert hosts.url == a  # the fewest in flight
    assert hosts.url_for(prefer=[b]) == b  # its cache is there: busier, but it goes back
    assert hosts.url_for(avoid={a}) == c
    assert hosts.url_for(avoid={a}, prefer=[a]) == c  # a host it failed on is never chosen
    for _ in range(DOWN_AFTER - 1):  # a failed request is one failed health check
        hosts.failed(b, "ConnectError")
    assert hosts.replicas[1].up
    hosts.failed(b, "ConnectError")
    assert not hosts.replicas[1].up and hosts.replicas[1].last_error == "ConnectError"
    assert hosts.url_for(prefer=[b]) == a  # its host is down: any up host
    with pytest.raises(BackendUnavailableError, match=r"no other replica of remote\.all is up"):
        hosts.url_for(avoid={a, c})


# --- a dropped request goes once to the other host -----------------------------------------


def test_a_host_that_drops_requests_sends_each_once_to_the_other_until_it_is_down(
    fake_binary: Path, tmp_path: Path, procs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = [free_port(), free_port()]
    # Host a dies 60 tokens into a generation (after the start's 48-token check).
    a = host(
        fake_binary, tmp_path, procs, ports[0], "--fake-crash-after", "60", "--fake-tps", "200"
    )
    b = host(fake_binary, tmp_path, procs, ports[1])
    with serve(tmp_path, [f"http://127.0.0.1:{p}" for p in ports]) as c:
        ready(c)
        no_more_checks(monkeypatch)
        # A stream half sent is never sent again: it ends with the in-band error.
        status, events = streamed(c, {**STREAM, "max_tokens": 100})
        assert status == 200 and "[DONE]" not in events
        assert "error" in json.loads(events[-1])
        assert len(posts(a, "/v1/completions")) == 1 and posts(b, "/v1/completions") == []
        procs[0].wait()
        # Host a is gone, its health not checked: each request fails there before its
        # first byte, goes once to b, and counts one failed check of a's.
        for n in range(1, DOWN_AFTER + 1):
            assert hosts_of(c)[0]["up"], n  # up until DOWN_AFTER requests failed there
            if n == 2:
                status, events = streamed(c, STREAM)
                assert (status, events[-1]) == (200, "[DONE]")
            else:
                r = c.post("/v1/completions", json=WHOLE)
                assert r.status_code == 200, r.text
                assert r.headers["x-fronde-mode"] == "ngram-mod"
            assert len(posts(b, "/v1/completions")) == n
        down = hosts_of(c)[0]
        assert not down["up"] and "127.0.0.1" in down["error"]
        assert hosts_of(c)[1]["up"]
        assert c.post("/v1/completions", json=WHOLE).status_code == 200  # b, at once
        assert len(posts(b, "/v1/completions")) == DOWN_AFTER + 1


def loading_host(binary: Path, tmp_path: Path, port: int, record: Path) -> subprocess.Popen[bytes]:
    """A fake host restarted at ``port``, loading its model (503 to every request)."""
    argv = [*PER_REQUEST, "--fake-record", str(record), "--fake-load-s", "600"]
    return start_fake(binary, port, tmp_path / "loading.log", *argv, health=503)


def test_a_host_loading_its_model_sends_the_request_to_the_other_and_with_none_a_503(
    fake_binary: Path, tmp_path: Path, procs: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = [free_port(), free_port()]
    host(fake_binary, tmp_path, procs, ports[0])
    b = host(fake_binary, tmp_path, procs, ports[1])
    with serve(tmp_path, [f"http://127.0.0.1:{p}" for p in ports]) as c:
        ready(c)
        no_more_checks(monkeypatch)
        kill(procs[0])  # host a restarts: while it loads, llama-server answers 503
        a = tmp_path / "a-loading.jsonl"
        procs.append(loading_host(fake_binary, tmp_path, ports[0], a))
        r = c.post("/v1/completions", json=WHOLE)
        assert r.status_code == 200, r.text
        assert (len(posts(a, "/v1/completions")), len(posts(b, "/v1/completions"))) == (1, 1)
        # No other host up to take it: a 503 the client may come back after.
        kill(procs[1])
        r = c.post("/v1/completions", json=WHOLE)
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
        error = r.json()["error"]
        assert error["code"] == "backend_unavailable"
        assert "no replica of remote.all could take the request" in error["message"]
        assert len(posts(a, "/v1/completions")) == 2  # once on each host, no more


# --- a probe's continuation goes back to the probe's host ----------------------------------


pytestmark = pytest.mark.anyio


async def test_the_continuation_goes_back_to_the_probes_host_while_it_is_up(
    fake_binary: Path, tmp_path: Path, procs: list[Any]
) -> None:
    ports = [free_port(), free_port()]
    records = [host(fake_binary, tmp_path, procs, p, "--fake-slot", "0") for p in ports]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    settings = load_settings(cache_dir=tmp_path, models_dir=tmp_path, remote={"all": urls})
    plan = remote_plan(settings)
    assert plan is not None
    pool = BackendPool.from_plan(settings, plan)
    assert pool.shared is not None and isinstance(pool.shared.process, RemoteMode)
    hosts = pool.shared.process
    busy = dict.fromkeys(urls, 0)  # requests in flight at each host, as the client counts
    pool.count_load_with(busy.__getitem__)
    await pool.start()
    prompt = "the quick brown fox jumps over the lazy dog"
    body: JSONObject = {"prompt": prompt, "max_tokens": 30}
    try:
        async with httpx.AsyncClient(timeout=30) as http:

            async def probed(after_probe: Callable[[], Awaitable[None]]) -> Splice:
                """The probe (ngram-mod, 8 tokens), then the floor's probe and the rest."""
                router = Router(RouterPolicy(probe_tokens=8))
                p = Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE, None)
                adm = Admission(router, Decision(p, RequestClass.GENERAL, "k", time.monotonic()))
                splice = Splice(BackendClient(http), pool, adm, "text", body)
                await splice.start()  # on host a: both idle, the first listed
                await after_probe()
                text = "".join([piece async for piece in splice.run()])
                adm.release()
                assert text == splice.text and len(splice.segments) == 3
                return splice

            async def a_busier() -> None:
                busy[urls[0]] = 5

            splice = await probed(a_busier)
            sent = [segments(r) for r in records]
            assert [len(s) for s in sent] == [3, 0]  # every segment on the probe's host
            assert [b.get("id_slot") for b in sent[0]] == [None, 0, 0]
            # Only the token each segment ended on is new to the slot's cache.
            assert [s.timings["prompt_n"] for s in splice.segments][1:] == [1, 1]

            async def a_down() -> None:
                kill(procs[0])
                for _ in range(100):  # DOWN_AFTER failed health checks
                    if not hosts.replicas[0].up:
                        return
                    await anyio.sleep(0.1)
                raise AssertionError("host a never went down")

            # The probe's host goes down after the probe: the other takes the rest and
            # prefills everything (it has never seen the prompt).
            busy[urls[0]] = 0
            splice = await probed(a_down)
            sent = [segments(r) for r in records]
            assert [len(s) for s in sent] == [4, 2]
            whole = len(tokenize(prompt)) + 8 - 1  # but BOS, cached by the start's check
            assert [s.timings["prompt_n"] for s in splice.segments][1:] == [whole, 1]
    finally:
        await pool.stop()
