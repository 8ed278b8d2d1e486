"""The single topology: one llama-server serves every mode, the mode chosen per request.

Over fake llama-servers (tests/fakes): ``--fake-per-request`` behaves as a binary built
with Fronde's patch set (the contract's ``speculative.n_max`` / ``speculative.types``),
without it as a stock b11434 (the fields ignored).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fronde.api.app import create_app
from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool, PoolPlan, plan_pool
from fronde.backends.process import BackendState, LaunchSpec
from fronde.backends.single import mode_fields, per_request_support, single_args
from fronde.config import load_settings
from fronde.errors import ConfigError
from fronde.json_types import JSONObject
from fronde.modes import Mode, SpeculationSettings
from fronde.request.admission import Admission
from fronde.request.splice import Splice
from fronde.router.classify import RequestClass
from fronde.router.engine import Decision, Router
from fronde.router.plan import Plan, Route, RouterPolicy
from fronde.runtime.models import load_profile

from ..fakes.fake_llama_server import tokenize
from ..procs import alive
from .test_contract import chat, ready

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"
MODES = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE]
FIELDS = {
    Mode.BASELINE: {"speculative.n_max": 0},
    Mode.NGRAM_SIMPLE: {"speculative.types": ["ngram-simple"]},
    Mode.NGRAM_MOD: {"speculative.types": ["ngram-mod"]},
    Mode.CASCADE: {"speculative.types": ["ngram-simple", "ngram-mod"]},
}
"""What each mode's requests must carry on the one server (the contract's names)."""


def value(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, (flag, args)
    return args[args.index(flag) + 1]


# --- the one server's argv and each mode's fields (pure) ---------------------------------


def test_the_one_server_starts_every_speculator_once() -> None:
    spec = SpeculationSettings()
    args = single_args(list(Mode), spec, Path("/m/draft.gguf"))
    assert value(args, "--spec-type") == "ngram-simple,ngram-mod,draft-simple"
    assert value(args, "--spec-ngram-mod-n-max") == "32"  # ngram-mod's and the cascade's, once
    assert value(args, "--spec-ngram-mod-n-min") == "16"
    assert value(args, "--spec-draft-model") == "/m/draft.gguf"
    assert value(args, "--spec-draft-n-max") == "12"
    assert single_args([Mode.BASELINE], spec, None) == []  # nothing to speculate with


def test_each_mode_is_its_fields() -> None:
    assert {m: mode_fields(m) for m in MODES} == FIELDS
    assert mode_fields(Mode.DRAFT) == {"speculative.types": ["draft-simple"]}
    # --backend-sampling was baseline's flag alone: on the one server, its requests' field.
    assert mode_fields(Mode.BASELINE, backend_sampling=True) == {
        "speculative.n_max": 0,
        "backend_sampling": True,
    }
    assert mode_fields(Mode.NGRAM_MOD, backend_sampling=True) == FIELDS[Mode.NGRAM_MOD]


def test_single_plans_the_one_server_beside_the_per_mode_ones(tmp_path: Path) -> None:
    profile = load_profile(REPO_MODELS, "gpu-qwen3-8b")
    for m in profile.models:
        (tmp_path / m.file).write_bytes(b"gguf")
    backend = {"plain_args": ["--backend-sampling"], "topology": "auto"}
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path, backend=backend)
    plan = plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path)
    # auto: a draft model on the one server would decode every request's tokens too.
    assert (plan.topology, plan.single) == ("per-mode", None)
    assert "draft mode" in plan.why
    settings = settings.model_copy(
        update={"backend": settings.backend.model_copy(update={"topology": "single"})}
    )
    plan = plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path)
    assert (plan.topology, set(plan.specs)) == ("single", set(Mode))  # per-mode: the fallback
    assert plan.single is not None
    args = plan.single.args
    assert value(args, "--spec-type") == "ngram-simple,ngram-mod,draft-simple"
    assert value(args, "--spec-draft-model") == str(tmp_path / "Qwen3-0.6B-Q8_0.gguf")
    assert "--backend-sampling" not in args  # it would reach every mode
    assert "--backend-sampling" in plan.specs[Mode.BASELINE].args
    assert plan.fields[Mode.BASELINE] == {"speculative.n_max": 0, "backend_sampling": True}
    assert plan.fields[Mode.DRAFT] == {"speculative.types": ["draft-simple"]}


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"residency": "swap"}, "residency = swap"),
        ({"remote": {"ngram-mod": ["http://gpu1:8081"]}}, "remote modes (ngram-mod)"),
        ({"backend": {"plain_args": ["--temp", "0"]}}, "no per-request field"),
        ({"backend": {"topology": "per-mode"}}, "backend.topology = per-mode"),
        ({"modes": ["ngram-mod"]}, "one mode"),
    ],
)
def test_auto_plans_per_mode_where_the_settings_need_it(
    tmp_path: Path, overrides: dict[str, Any], why: str
) -> None:
    profile = load_profile(REPO_MODELS, "cpu-gemma-270m")
    with (tmp_path / profile.target.file).open("wb") as f:
        f.truncate(profile.target.size or 1)
    overrides = {**overrides, "backend": {"topology": "auto", **overrides.get("backend", {})}}
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path, **overrides)
    plan = plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path)
    assert (plan.topology, plan.single) == ("per-mode", None)
    assert why in plan.why


def test_single_asked_for_where_it_cannot_serve_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"topology = single, but residency = swap"):
        load_settings(cache_dir=tmp_path, residency="swap", backend={"topology": "single"})
    load_settings(cache_dir=tmp_path, backend={"topology": "single", "plain_args": ["-bs"]})


# --- the topology settled at start ------------------------------------------------------


def single_plan(
    binary: Path, tmp_path: Path, *knobs: str, topology: str = "auto", each: tuple[str, ...] = ()
) -> PoolPlan:
    """Per-mode fakes (``each`` their knobs) and the one fake of every mode (``knobs``)."""
    own = {m: ["--alias", "fronde", "--spec-type", str(m), *each] for m in MODES}
    specs = {m: LaunchSpec(m, binary, own[m], tmp_path / f"{m}.log") for m in MODES}
    argv = ["--alias", "fronde", "--spec-type", "ngram-simple,ngram-mod", *knobs]
    shared = LaunchSpec("single", binary, argv, tmp_path / "single.log")
    left_out = {Mode.DRAFT: "profile has no draft model"}
    fields = {m: mode_fields(m) for m in MODES}
    return PoolPlan(specs, left_out, single=shared, fields=fields, topology=topology)  # type: ignore[arg-type]


pytestmark = pytest.mark.anyio


async def test_auto_runs_one_server_for_every_mode_when_the_binary_honours_the_fields(
    fake_binary: Path, tmp_path: Path
) -> None:
    pool = BackendPool(single_plan(fake_binary, tmp_path, "--fake-per-request"), stop_grace_s=1)
    await pool.start()
    try:
        assert pool.topology == "single"
        assert "honours per-request speculation" in pool.topology_why
        assert pool.ready_modes() == MODES
        assert len(pool.pids()) == 1
        assert {pool.get(m).url for m in MODES} == {pool.get(Mode.BASELINE).url}
        assert {m: dict(pool.fields(m)) for m in MODES} == FIELDS
        assert pool.local_slots(pool.get(Mode.CASCADE).url) == 1
    finally:
        await pool.stop()
    assert pool.pids() == []


@pytest.mark.parametrize(
    ("knobs", "why"),
    [
        ((), "no speculative_per_request"),
        (("--fake-props-only",), "speculative.n_max = -1 was accepted"),  # /props is not enough
        (("--fake-exit-on-start", "3"), "did not start"),
    ],
)
async def test_auto_falls_back_to_a_server_per_mode_and_says_why(
    fake_binary: Path, tmp_path: Path, knobs: tuple[str, ...], why: str
) -> None:
    pool = BackendPool(single_plan(fake_binary, tmp_path, *knobs), stop_grace_s=1)
    await pool.start()
    try:
        assert pool.topology == "per-mode"
        assert why in pool.topology_why
        assert pool.ready_modes() == MODES
        assert len(pool.pids()) == len(MODES)  # the one server is gone
        assert len({pool.get(m).url for m in MODES}) == len(MODES)
        assert all(not pool.fields(m) for m in MODES)
    finally:
        await pool.stop()


async def test_auto_remembers_a_stock_binary_until_it_is_rebuilt(
    fake_binary: Path, tmp_path: Path
) -> None:
    """The next start of the same binary skips loading the model for the check."""
    binary = tmp_path / "llama-server"
    shutil.copy(fake_binary, binary)
    profile = load_profile(REPO_MODELS, "cpu-gemma-270m")
    with (tmp_path / profile.target.file).open("wb") as f:
        f.truncate(profile.target.size or 1)
    settings = load_settings(
        models_dir=tmp_path, cache_dir=tmp_path, modes=MODES, backend={"topology": "auto"}
    )
    plan = plan_pool(settings, profile, binary, tmp_path)
    assert plan.topology == "auto"
    pool = BackendPool(plan, stop_grace_s=1)
    await pool.start()
    await pool.stop()
    assert pool.topology == "per-mode"
    again = plan_pool(settings, profile, binary, tmp_path)
    assert (again.topology, again.single) == ("per-mode", None)
    assert "no speculative_per_request" in again.why and "to check again" in again.why
    os.utime(binary, ns=(time.time_ns(), time.time_ns() + 10**9))  # rebuilt in place: checked again
    assert plan_pool(settings, profile, binary, tmp_path).topology == "auto"


async def test_single_asked_for_on_a_stock_binary_leaves_every_mode_failed(
    fake_binary: Path, tmp_path: Path
) -> None:
    pool = BackendPool(single_plan(fake_binary, tmp_path, topology="single"), stop_grace_s=1)
    await pool.start()
    try:
        assert pool.ready_modes() == [] and pool.pids() == []
        status = pool.status()
        for mode in MODES:
            assert status[str(mode)]["state"] == str(BackendState.FAILED)
            assert "does not honour per-request speculation" in status[str(mode)]["error"]
    finally:
        await pool.stop()


async def test_the_check_reads_behaviour_not_only_props(fake_binary: Path, tmp_path: Path) -> None:
    pool = BackendPool(single_plan(fake_binary, tmp_path, "--fake-per-request"), stop_grace_s=1)
    await pool.start()
    try:
        assert await per_request_support(pool.get(Mode.BASELINE).url) is None
    finally:
        await pool.stop()
    assert "Connect" in (await per_request_support("http://127.0.0.1:9", timeout_s=1) or "")


# --- requests through the app ------------------------------------------------------------


def single_client(binary: Path, tmp_path: Path, *knobs: str, **overrides: Any) -> TestClient:
    plan = single_plan(binary, tmp_path, "--fake-per-request", *knobs)
    overrides = {**overrides, "backend": {"topology": "auto", **overrides.get("backend", {})}}
    settings = load_settings(cache_dir=tmp_path, models_dir=tmp_path, **overrides)
    pool = BackendPool(plan, stop_grace_s=1.0)
    return TestClient(create_app(settings, pool=pool), raise_server_exceptions=False)


def recorded(path: Path, route: str) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()
    return [r["body"] for r in map(json.loads, lines) if r["path"] == route]


def test_a_mode_is_its_fields_on_the_one_server(fake_binary: Path, tmp_path: Path) -> None:
    record = tmp_path / "posts.jsonl"
    with single_client(fake_binary, tmp_path, "--fake-record", str(record)) as c:
        ready(c)
        health = c.get("/health").json()
        assert health["topology"] == "single"
        pids = {b["pid"] for b in health["backends"].values() if b["state"] == "ready"}
        assert len(pids) == 1
        models = [m["id"] for m in c.get("/v1/models").json()["data"]]
        assert models == ["fronde", *(f"fronde:{m}" for m in MODES)]
        drafted: dict[Mode, Any] = {}
        for mode in MODES:
            # A client's own speculative.types does not override the mode chosen.
            body = {**chat(), "speculative.types": ["ngram-mod"]}
            r = c.post("/v1/chat/completions", json=body, headers={"x-fronde-mode": str(mode)})
            assert (r.status_code, r.headers["x-fronde-mode"]) == (200, str(mode))
            drafted[mode] = r.json()["timings"].get("draft_n")
            with c.stream(
                "POST",
                "/v1/completions",
                json={"prompt": "a b", "max_tokens": 3, "stream": True},
                headers={"x-fronde-mode": str(mode)},
            ) as s:
                assert s.headers["x-fronde-mode"] == str(mode)
                assert "data: [DONE]" in list(s.iter_lines())
        r = c.post("/completion?mode=cascade", json={"prompt": "a b", "n_predict": 2})
        assert r.status_code == 200
    assert drafted[Mode.BASELINE] is None and all(drafted[m] for m in MODES[1:])
    chats = recorded(record, "/v1/chat/completions")
    texts = recorded(record, "/v1/completions")
    for i, mode in enumerate(MODES):
        for sent in (chats[i], texts[i]):
            assert {k: sent.get(k) for k in FIELDS[mode]} == FIELDS[mode], (mode, sent)
    assert chats[0]["speculative.types"] == ["ngram-mod"]  # baseline: n_max 0 rules anyway
    native = [b for b in recorded(record, "/completion") if b.get("prompt") == "a b"]
    assert native[-1]["speculative.types"] == ["ngram-simple", "ngram-mod"]


def test_a_field_the_server_was_not_started_with_is_its_400(
    fake_binary: Path, tmp_path: Path
) -> None:
    with single_client(fake_binary, tmp_path) as c:
        ready(c)
        r = c.post("/completion", json={"prompt": "a", "speculative.types": ["draft-simple"]})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_a_crash_of_the_one_server_ends_every_request_and_503s_until_it_is_back(
    fake_binary: Path, tmp_path: Path
) -> None:
    """Every mode is down at once: nothing lost, nothing hung, ready again after a restart."""
    from concurrent.futures import ThreadPoolExecutor

    decodes = {"max_parallel_decodes": 8}  # every request generating when the server dies
    with single_client(fake_binary, tmp_path, "--fake-tps", "20", router=decodes) as c:
        ready(c)
        pid = c.get("/health").json()["backends"]["baseline"]["pid"]

        def stream(mode: Mode) -> list[str]:
            body = {**chat(), "max_tokens": 200, "stream": True}
            with c.stream(
                "POST", "/v1/chat/completions", json=body, headers={"x-fronde-mode": str(mode)}
            ) as r:
                assert r.status_code == 200
                return [ln for ln in r.iter_lines() if ln.startswith("data: ")]

        def whole(mode: Mode) -> int:
            body = {**chat(), "max_tokens": 200}
            return c.post(
                "/v1/chat/completions", json=body, headers={"x-fronde-mode": str(mode)}
            ).status_code

        with ThreadPoolExecutor(8) as pool:
            streams = [pool.submit(stream, m) for m in MODES]
            wholes = [pool.submit(whole, m) for m in MODES]
            time.sleep(1.0)  # every request is generating now
            os.kill(pid, signal.SIGKILL)
            ended = [f.result(timeout=30) for f in streams]
            statuses = [f.result(timeout=30) for f in wholes]
        for lines in ended:  # each stream ends with its error event, never [DONE]
            assert "data: [DONE]" not in lines
            assert json.loads(lines[-1][6:])["error"]["type"] == "server_error"
        assert set(statuses) <= {502, 503}  # never a silent success
        r = c.post("/v1/chat/completions", json=chat())
        assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
        forced = c.post("/v1/chat/completions", json=chat(), headers={"x-fronde-mode": "ngram-mod"})
        assert forced.status_code == 503 and "retry-after" in forced.headers
        ready(c)  # the supervisor restarted it
        health = c.get("/health").json()["backends"]
        assert {b["restarts"] for b in health.values() if "restarts" in b} == {1}
        new_pid = health["baseline"]["pid"]
        assert new_pid != pid and not alive(pid)
        r = c.post("/v1/chat/completions", json=chat(), headers={"x-fronde-mode": "cascade"})
        assert r.status_code == 200
    assert not alive(new_pid)


# --- the probe continues on its own slot --------------------------------------------------


async def probed(pool: Any, prompt: str) -> tuple[Splice, BackendClient, frozenset[int]]:
    """A probe on ngram-mod, the floor's probe and its continuation on baseline."""
    router = Router(RouterPolicy(probe_tokens=8))
    plan = Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE, None)
    decision = Decision(plan, RequestClass.GENERAL, "key", time.monotonic())
    adm = Admission(router, decision)
    body: JSONObject = {"prompt": prompt, "max_tokens": 30}
    async with httpx.AsyncClient(timeout=30) as http:
        client = BackendClient(http)
        splice = Splice(client, pool, adm, "text", body)
        await splice.start()
        text = "".join([p async for p in splice.run()])
        held = client.pins.held(pool.get(Mode.BASELINE).url)
        adm.release()
    assert text == splice.text and len(splice.segments) == 3
    return splice, client, held


async def test_the_continuation_runs_on_the_probes_slot_from_its_cache(
    fake_binary: Path, tmp_path: Path
) -> None:
    record = tmp_path / "posts.jsonl"
    knobs = ("--fake-per-request", "--fake-slot", "3", "--fake-record", str(record))
    pool = BackendPool(single_plan(fake_binary, tmp_path, *knobs), stop_grace_s=1)
    await pool.start()
    prompt = "the quick brown fox jumps over the lazy dog"
    try:
        splice, client, held = await probed(pool, prompt)
        url = pool.get(Mode.BASELINE).url
    finally:
        await pool.stop()
    assert held == {3}  # kept between the segments, let go with the answer
    assert client.pins.held(url) == frozenset()
    sent = [b for b in recorded(record, "/completion") if b.get("stream")]
    assert [b.get("id_slot") for b in sent] == [None, 3, 3]
    assert all(b["cache_prompt"] for b in sent)
    assert [
        {k: b.get(k) for k in FIELDS[m]}
        for b, m in zip(sent, [Mode.NGRAM_MOD, Mode.BASELINE, Mode.BASELINE], strict=True)
    ] == [FIELDS[Mode.NGRAM_MOD], FIELDS[Mode.BASELINE], FIELDS[Mode.BASELINE]]
    first, *then = [s.timings["prompt_n"] for s in splice.segments]
    # The whole prompt once (but BOS, cached by the check's request on the same slot);
    # after it, only the token the last segment ended on.
    assert (first, then) == (len(tokenize(prompt)) - 1, [1, 1])


async def test_per_mode_a_hand_over_prefills_the_whole_prompt_again(
    fake_binary: Path, tmp_path: Path
) -> None:
    """The "before" of the test above: the floor's server has never seen the prompt."""
    plan = single_plan(fake_binary, tmp_path, topology="per-mode", each=("--fake-slot", "0"))
    pool = BackendPool(plan, stop_grace_s=1)
    await pool.start()
    prompt = "the quick brown fox jumps over the lazy dog"
    try:
        splice, _, _ = await probed(pool, prompt)
    finally:
        await pool.stop()
    prompt_n = [s.timings["prompt_n"] for s in splice.segments]
    assert prompt_n == [len(tokenize(prompt)), len(tokenize(prompt)) + 8, 1]
