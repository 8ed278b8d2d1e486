"""Remote hosts that serve every mode (``remote.all``): single over several llama-servers.

Over fake llama-servers (tests/fakes): ``--fake-per-request`` behaves as a binary built
with Fronde's patch set (it honours ``speculative.n_max`` / ``speculative.types`` and
shows its ``--spec-type`` in ``/props``), without it as a stock b11434.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends.pool import BackendPool
from fronde.backends.pool_plan import remote_plan
from fronde.backends.process import free_port
from fronde.backends.remote import UP_AFTER, Replica
from fronde.backends.single import mode_fields
from fronde.config import Settings, load_settings
from fronde.errors import ConfigError
from fronde.modes import Mode

from .test_contract import chat, ready
from .test_remote import start_fake

MODES = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE]
"""The modes a host started with ``--spec-type ngram-simple,ngram-mod`` serves."""


# --- the setting (pure) ------------------------------------------------------------------


def test_remote_all_names_hosts_of_every_mode(tmp_path: Path) -> None:
    toml = tmp_path / "fronde.toml"
    toml.write_text('[remote]\nall = ["http://gpu1:8080", "http://gpu2:8080/"]\n')
    settings = load_settings(toml, cache_dir=tmp_path)
    assert settings.remote_hosts == ["http://gpu1:8080", "http://gpu2:8080/"]
    assert settings.remote_modes == {}
    assert settings.single_conflict() is None
    plan = remote_plan(settings)  # no model, binary or manifest on this host
    assert plan is not None and plan.hosts == ("http://gpu1:8080", "http://gpu2:8080/")
    assert (plan.topology, plan.specs, plan.remote) == ("single", {}, {})
    assert plan.fields == {m: mode_fields(m) for m in Mode}
    # The per-mode form is as it was.
    per_mode = load_settings(cache_dir=tmp_path, remote={"ngram-mod": ["http://gpu1:8081"]})
    assert per_mode.remote_modes == {Mode.NGRAM_MOD: ["http://gpu1:8081"]}
    assert per_mode.remote_hosts == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"remote": {"all": ["http://gpu1:8080"], "ngram-mod": ["http://gpu2:8081"]}},
            "remote.all serves every mode from each host, so remote.ngram-mod cannot stand",
        ),
        (
            {"remote": {"all": ["http://gpu1:8080"]}, "backend": {"topology": "per-mode"}},
            "remote.all serves every mode from one llama-server per host, but "
            "backend.topology = per-mode",
        ),
        (
            {"remote": {"all": ["http://gpu1:8080"]}, "residency": "swap"},
            "but residency = swap",
        ),
        ({"remote": {"all": ["gpu1:8080"]}}, "remote.all: 'gpu1:8080' is not an http(s) URL"),
    ],
)
def test_remote_all_where_it_cannot_serve_is_one_line(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_settings(cache_dir=tmp_path, **overrides)
    assert "\n" not in err.value.message


def test_a_refused_host_stays_out_until_it_goes_down_and_comes_back() -> None:
    r = Replica("http://h:1")
    assert [r.due, r.observe(True), r.due] == [False, False, True]  # the next ok: check first
    r.refuse("does not honour per-request speculation")
    assert [r.observe(True) for _ in range(UP_AFTER + 2)] == [False] * (UP_AFTER + 2)
    assert not r.up and r.settled and not r.due
    assert r.last_error == "does not honour per-request speculation"
    r.observe(False, "ConnectError")  # down (restarted, maybe with another binary)
    assert not r.refused and r.last_error == "ConnectError"
    assert [r.observe(True), r.due] == [False, True]  # checked again before it serves


# --- fake hosts --------------------------------------------------------------------------


def start_host(binary: Path, port: int, log: Path, *knobs: str) -> subprocess.Popen[bytes]:
    """A fake llama-server at ``port`` (the n-gram speculators unless ``knobs`` say)."""
    spec = () if "--spec-type" in knobs else ("--spec-type", "ngram-simple,ngram-mod")
    return start_fake(binary, port, log, *spec, *knobs)


@pytest.fixture
def hosts(fake_binary: Path, tmp_path: Path) -> Iterator[Any]:
    """Factory: ``hosts(knobs, ...)`` → (urls, processes), one fake host per knob list."""
    procs: list[subprocess.Popen[bytes]] = []

    def factory(*each: tuple[str, ...]) -> tuple[list[str], list[subprocess.Popen[bytes]]]:
        ports = [free_port() for _ in each]
        for port, knobs in zip(ports, each, strict=True):
            procs.append(start_host(fake_binary, port, tmp_path / f"h{port}.log", *knobs))
        return [f"http://127.0.0.1:{p}" for p in ports], procs[-len(each) :]

    yield factory
    for proc in procs:
        proc.kill()
        proc.wait()


def settings_for(tmp_path: Path, urls: list[str], **overrides: Any) -> Settings:
    router = {"max_parallel_decodes": 4, "load_rule": "off"}
    return load_settings(
        cache_dir=tmp_path, models_dir=tmp_path, remote={"all": urls}, router=router, **overrides
    )


def recorded(path: Path, route: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [r["body"] for r in map(json.loads, lines) if r["path"] == route]


def health_of(c: TestClient, mode: Mode) -> dict[str, Any]:
    return c.get("/health").json()["backends"][str(mode)]


def test_every_mode_reaches_a_host_with_its_fields(hosts: Any, tmp_path: Path) -> None:
    records = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    urls, _ = hosts(*(("--fake-per-request", "--fake-record", str(r)) for r in records))
    with TestClient(create_app(settings_for(tmp_path, urls))) as c:  # no pool: compose's
        ready(c)
        health = c.get("/health").json()
        assert health["topology"] == "single"
        assert "remote.all: 2 host(s)" in health["topology_why"]
        for mode in MODES:
            assert health["backends"][str(mode)]["state"] == "ready"
            assert [r["url"] for r in health["backends"][str(mode)]["replicas"]] == urls
        # The hosts run no draft model: the draft mode is left out, and says why.
        draft = health["backends"]["draft"]
        assert draft["state"] == "left-out" and "draft-simple" in draft["error"]
        for mode in MODES:
            r = c.post("/v1/chat/completions", json=chat(), headers={"x-fronde-mode": str(mode)})
            assert (r.status_code, r.headers["x-fronde-mode"]) == (200, str(mode))
    sent = [b for r in records for b in recorded(r, "/v1/chat/completions")]
    assert len(sent) == len(MODES)
    for mode, body in zip(MODES, sent, strict=True):
        want = mode_fields(mode)
        assert {k: body.get(k) for k in want} == want, (mode, body)


def test_the_less_loaded_host_serves_and_a_host_that_dies_is_left(
    hosts: Any, tmp_path: Path
) -> None:
    records = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    urls, procs = hosts(*(("--fake-per-request", "--fake-record", str(r)) for r in records))
    body = {"prompt": "a b c", "max_tokens": 30, "model": "fronde:ngram-mod"}
    with TestClient(create_app(settings_for(tmp_path, urls))) as c:
        ready(c)

        def one() -> None:
            assert c.post("/v1/completions", json=body).status_code == 200

        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.3)  # the second arrives while the first decodes (1.5 s)
        for t in threads:
            t.join()
        assert [len(recorded(r, "/v1/completions")) for r in records] == [1, 1]

        procs[0].kill()
        procs[0].wait()
        for _ in range(100):
            if not health_of(c, Mode.NGRAM_MOD)["replicas"][0]["up"]:
                break
            time.sleep(0.1)
        replicas = health_of(c, Mode.NGRAM_MOD)["replicas"]
        assert [r["up"] for r in replicas] == [False, True] and replicas[0]["error"]
        for mode in (Mode.BASELINE, Mode.CASCADE):  # every mode moves with it
            r = c.post("/v1/completions", json={**body, "model": f"fronde:{mode}"})
            assert r.status_code == 200
        moved = recorded(records[1], "/v1/completions")[1:]
        assert [b.get("speculative.n_max") for b in moved] == [0, None]
        assert moved[1]["speculative.types"] == ["ngram-simple", "ngram-mod"]


pytestmark = pytest.mark.anyio


async def test_a_stock_host_is_a_start_error_that_names_it(hosts: Any, tmp_path: Path) -> None:
    (good, stock), _ = hosts(("--fake-per-request",), ())
    settings = settings_for(tmp_path, [good, stock])
    plan = remote_plan(settings)
    assert plan is not None
    pool = BackendPool.from_plan(settings, plan)
    await pool.start()
    try:
        assert pool.ready_modes() == []
        status = pool.status()
        for mode in MODES:
            error = status[str(mode)]["error"]
            assert status[str(mode)]["state"] == "failed"
            assert f"{stock} does not honour per-request speculation" in error
            assert "cannot start one llama-server per mode on a remote host" in error
            assert "remote.<mode>" in error
            assert good not in error
    finally:
        await pool.stop()


async def test_a_mode_no_host_can_draft_for_is_left_out(hosts: Any, tmp_path: Path) -> None:
    (url,), _ = hosts(("--fake-per-request", "--spec-type", "ngram-mod"))
    settings = settings_for(tmp_path, [url], modes=MODES)
    plan = remote_plan(settings)
    assert plan is not None
    pool = BackendPool.from_plan(settings, plan)
    await pool.start()
    try:
        assert pool.ready_modes() == [Mode.BASELINE, Mode.NGRAM_MOD]
        assert pool.topology == "single"
        why = pool.left_out[Mode.CASCADE]
        assert f"{url} runs --spec-type ngram-mod: cascade needs ngram-simple,ngram-mod" in why
        assert set(pool.left_out) == {Mode.NGRAM_SIMPLE, Mode.CASCADE}
        assert dict(pool.fields(Mode.NGRAM_MOD)) == {"speculative.types": ["ngram-mod"]}
        assert pool.local_slots(pool.get(Mode.NGRAM_MOD).url) == 0  # not this pool's slots
        assert pool.pids() == []
    finally:
        await pool.stop()
