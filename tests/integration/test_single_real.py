"""The single topology on the real llama-server b11434 and gemma-3-270m.

With the stock binary (``fronde install --no-patches``, or a build from before the patch
set) ``auto`` falls back to one llama-server per mode, and a probe's hand-over to the
floor's server prefills the whole prompt there: the "before" of the continuation on
the probe's own slot. With a binary built with Fronde's patch set, named by
``FRONDE_PATCHED_LLAMA_SERVER`` (its tests skip without it, saying so), one server
serves every mode, each request runs as its fields say, a hand-over continues from the
probe's KV cache, and a crash of the one server ends every request in band and is
repaired by its supervisor.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.backends.client import BackendClient
from fronde.backends.pool import RESTART_BACKOFF_S, BackendPool
from fronde.config import load_settings
from fronde.evidence.calibration import LoadCurves, load_key, save_load_curves
from fronde.evidence.draft_schedule import DraftSchedule
from fronde.json_types import JSONObject, json_int
from fronde.modes import Mode
from fronde.request import splice as splice_module
from fronde.request.admission import Admission
from fronde.request.splice import Splice
from fronde.router.classify import RequestClass
from fronde.router.engine import Decision, Router
from fronde.router.plan import Plan, Route, RouterPolicy
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of

from ..procs import alive
from .conftest import GEMMA, SMOLLM2, require_real_parts, start_serve

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

PATCHED_ENV = "FRONDE_PATCHED_LLAMA_SERVER"
"""Names a llama-server built with Fronde's patch set; the patched tests skip without it."""

PROMPT = (
    "The committee met on Tuesday to review the budget for the coming year. After a long "
    "discussion of the costs of the new building, the members agreed that"
)
COPY = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n" * 3
"""A prompt gemma continues by copying it: the n-gram speculators draft on it at once."""

PROBE_TOKENS = 48


def installed_binary() -> tuple[Path, bool]:
    """The llama-server `fronde install` left, and whether it carries Fronde's patch set."""
    require_real_parts()
    settings = load_settings()
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    meta = binary.parent.parent / "install.json"  # written by fronde install beside bin/
    patched = meta.is_file() and bool(json.loads(meta.read_text()).get("patches"))
    return binary, patched


def patched_binary() -> Path:
    """``FRONDE_PATCHED_LLAMA_SERVER``, else the installed one if patched, else a skip."""
    path = os.environ.get(PATCHED_ENV)
    if path:
        if not Path(path).is_file():
            pytest.skip(f"{PATCHED_ENV}={path} is not a file")
        return Path(path)
    binary, patched = installed_binary()
    if not patched:
        pytest.skip(f"{binary} is stock: `fronde install` builds the patched one")
    return binary


def stock_binary() -> Path:
    """The installed llama-server if stock, else a skip (``fronde install --no-patches``)."""
    binary, patched = installed_binary()
    if patched:
        pytest.skip(f"{binary} carries Fronde's patch set: these tests need a stock build")
    return binary


@asynccontextmanager
async def pool_on(
    binary: Path, tmp_path: Path, modes: list[Mode], profile: str = GEMMA
) -> AsyncGenerator[BackendPool]:
    """The pool ``fronde serve`` would start on ``profile`` with ``binary`` (topology auto)."""
    settings = load_settings(
        profile=profile,
        modes=modes,
        llama_server=binary,
        cache_dir=tmp_path / "cache",
        backend={"topology": "auto"},
    )
    pool = BackendPool.from_settings(settings, profile_of(settings), binary, tmp_path)
    await pool.start()
    try:
        yield pool
    finally:
        await pool.stop()


async def spliced(pool: BackendPool, floor_tok_s: float) -> list[int]:
    """A probe on ngram-mod, then the rest on the winner: each segment's ``prompt_n``.

    ``floor_tok_s`` picks the winner: huge, the floor (baseline) takes over (the caller
    makes the hand-over pay whatever the prefill costs); tiny, the probed mode continues.
    """
    router = Router(RouterPolicy(probe_tokens=PROBE_TOKENS))
    plan = Plan(Route.PROBE, Mode.NGRAM_MOD, Mode.BASELINE, floor_tok_s)
    adm = Admission(router, Decision(plan, RequestClass.GENERAL, "k", time.monotonic()))
    body: JSONObject = {"prompt": PROMPT, "max_tokens": 96, "temperature": 0}
    async with httpx.AsyncClient(timeout=120) as http:
        splice = Splice(BackendClient(http), pool, adm, "text", body)
        await splice.start()
        _ = [p async for p in splice.run()]
        adm.release()
    assert len(splice.segments) == 2, splice.fronde_info()
    want = Mode.BASELINE if floor_tok_s > 1 else Mode.NGRAM_MOD
    assert splice.segments[1].mode is want, splice.fronde_info()
    prompt_n = [json_int(s.timings["prompt_n"]) for s in splice.segments]
    print(f"prompt ids {len(splice.prompt)}, segments' prompt_n {prompt_n}")
    return prompt_n


# --- the stock binary --------------------------------------------------------------------


async def test_auto_runs_a_server_per_mode_on_the_stock_binary(tmp_path: Path) -> None:
    binary = stock_binary()
    async with pool_on(binary, tmp_path, [Mode.BASELINE, Mode.NGRAM_MOD]) as pool:
        assert pool.topology == "per-mode"
        assert "speculative_per_request" in pool.topology_why
        assert pool.ready_modes() == [Mode.BASELINE, Mode.NGRAM_MOD]
        assert len(set(pool.pids())) == 2
        pids = pool.pids()
    assert not any(alive(p) for p in pids)


@pytest.fixture
def handing_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every hand-over pays (its prefill is what the tests measure)."""

    def always(*_: object) -> bool:
        return True

    monkeypatch.setattr(splice_module, "hand_over_pays", always)


@pytest.mark.usefixtures("handing_over")
async def test_per_mode_a_hand_over_prefills_the_whole_prompt_its_own_slot_does_not(
    tmp_path: Path,
) -> None:
    """The "before": the floor's server has never seen the prompt; the probed server has.

    SmolLM2 (llama): a slot's cache is reused whole. gemma-3 keeps a sliding-window cache
    that b11434 restores from the last checkpoint of the prompt, so there a continuation
    prefills the generated tokens again (53 of 79 here; all of them reused with
    ``--swa-full``): docs/design.md, Probe-and-continue.
    """
    binary = stock_binary()
    modes = [Mode.BASELINE, Mode.NGRAM_MOD]
    async with pool_on(binary, tmp_path, modes, profile=SMOLLM2) as pool:
        probe, handed = await spliced(pool, floor_tok_s=1e9)
        _, continued = await spliced(pool, floor_tok_s=1e-9)
    assert handed >= probe + PROBE_TOKENS - 1  # the prompt and the probe's tokens again
    assert continued <= 2  # its own slot: only the token the probe ended on


# --- the patched binary ------------------------------------------------------------------


async def test_one_server_serves_every_mode_by_its_fields(tmp_path: Path) -> None:
    binary = patched_binary()
    modes = [Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE]
    async with pool_on(binary, tmp_path, modes) as pool:
        assert pool.topology == "single", pool.topology_why
        assert len(pool.pids()) == 1
        url = pool.get(Mode.BASELINE).url
        ran: dict[Mode, dict[str, Any]] = {}
        async with httpx.AsyncClient(timeout=120) as http:
            for mode in modes:
                body = {"prompt": COPY, "n_predict": 48, "temperature": 0, **pool.fields(mode)}
                r = await http.post(f"{url}/completion", json=body)
                assert r.status_code == 200, r.text
                ran[mode] = r.json()
            bad = {"prompt": "a", "n_predict": 1, "speculative.types": ["draft-simple"]}
            refused = await http.post(f"{url}/completion", json=bad)
    assert refused.status_code == 400  # a speculator the server was not started with
    assert not ran[Mode.BASELINE]["timings"].get("draft_n")
    assert ran[Mode.BASELINE]["timings"].get("draft_n_max") == 0
    for mode in modes[1:]:
        assert ran[mode]["timings"].get("draft_n", 0) > 0, (mode, ran[mode]["timings"])
        types = ran[mode]["generation_settings"]["speculative.types"]
        listed = types.split(",") if isinstance(types, str) else types  # either spelling
        assert listed == pool.fields(mode)["speculative.types"]
    # Greedy: plain decoding and each speculator verify to the same text (near-ties aside).
    texts = {m: ran[m]["content"] for m in modes}
    assert len(set(texts.values())) == 1, texts


@pytest.mark.usefixtures("handing_over")
async def test_the_continuation_runs_from_the_probes_cache(tmp_path: Path) -> None:
    """The "after": the floor continues on the probe's slot of the one server."""
    binary = patched_binary()
    modes = [Mode.BASELINE, Mode.NGRAM_MOD]
    async with pool_on(binary, tmp_path, modes, profile=SMOLLM2) as pool:
        assert pool.topology == "single", pool.topology_why
        probe, handed = await spliced(pool, floor_tok_s=1e9)
    assert probe > 20 and handed <= 2  # the whole prompt once; then only the last token


def test_a_crash_of_the_one_server_ends_every_request_and_it_comes_back(tmp_path: Path) -> None:
    """SIGKILL the one llama-server under load: nothing lost, nothing hung, back in time."""
    binary = patched_binary()
    env = {
        "FRONDE_LLAMA_SERVER": str(binary),
        "FRONDE_BACKEND__PARALLEL": "4",
        "FRONDE_ROUTER__MAX_PARALLEL_DECODES": "4",
        "FRONDE_BACKEND__TOPOLOGY": "auto",
    }
    serve = start_serve(
        tmp_path, *(a for m in ("baseline", "ngram-mod") for a in ("--mode", m)), env=env
    )
    try:
        health = serve.health()
        assert health["topology"] == "single", health
        pid = health["backends"]["baseline"]["pid"]
        started = [
            json.loads(ln) for ln in serve.log.read_text().splitlines() if "backend.started" in ln
        ]
        load_s = max(float(e["load_s"]) for e in started)

        def stream(mode: str) -> list[str]:
            body = {"prompt": PROMPT, "max_tokens": 400, "stream": True, "ignore_eos": True}
            with httpx.stream(
                "POST",
                f"{serve.base_url}/v1/completions",
                json=body,
                headers={"x-fronde-mode": mode},
                timeout=120,
            ) as r:
                assert r.status_code == 200, r.read()
                return [ln for ln in r.iter_lines() if ln.startswith("data: ")]

        with ThreadPoolExecutor(4) as ex:
            runs = [ex.submit(stream, m) for m in ("baseline", "ngram-mod") * 2]
            time.sleep(3.0)
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            ended = [f.result(timeout=60) for f in runs]
        for lines in ended:
            assert "data: [DONE]" not in lines
            assert "error" in json.loads(lines[-1][6:])
        r = httpx.post(f"{serve.base_url}/v1/completions", json={"prompt": "a", "max_tokens": 2})
        assert r.status_code == 503 and "retry-after" in r.headers
        serve.wait_all_ready(timeout_s=60)
        back_s = time.monotonic() - killed
        assert back_s <= RESTART_BACKOFF_S[0] + 2 * load_s + 5, (back_s, load_s)
        r = httpx.post(f"{serve.base_url}/v1/completions", json={"prompt": "a", "max_tokens": 2})
        assert r.status_code == 200
    finally:
        serve.stop(signal.SIGKILL)


def test_the_measured_draft_length_reaches_the_one_server(tmp_path: Path) -> None:
    """A draft-length schedule in the cache's load.json caps an ngram-mod request's drafts.

    The schedule says n_max 8 at one request in flight (what ``fronde bench load
    --draft-lengths`` saves); a copy prompt forced to ngram-mod then runs on the one
    server with ``draft_n_max`` 8 in its timings (patch 0004 shows it), and the answer
    says so in ``x-fronde-draft-n-max``.
    """
    binary = patched_binary()
    cache = tmp_path / "cache"
    settings = load_settings(profile=GEMMA, llama_server=binary, cache_dir=cache)
    curves = LoadCurves(
        {Mode.BASELINE: ((1, 100.0),), Mode.NGRAM_MOD: ((1, 200.0),)},
        source="test",
        lengths=DraftSchedule({Mode.NGRAM_MOD: ((1, 8),)}),
    )
    save_load_curves(cache, load_key(settings), curves)
    env = {"FRONDE_CACHE_DIR": str(cache), "FRONDE_LLAMA_SERVER": str(binary)}
    serve = start_serve(tmp_path, "--mode", "baseline", "--mode", "ngram-mod", env=env)
    try:
        body = {"prompt": COPY, "max_tokens": 48, "temperature": 0}
        r = httpx.post(
            f"{serve.base_url}/v1/completions",
            json=body,
            headers={"x-fronde-mode": "ngram-mod"},
            timeout=120,
        )
        router = httpx.get(f"{serve.base_url}/fronde/v1/router", timeout=10).json()
    finally:
        serve.stop()
    assert r.status_code == 200, r.text
    assert r.headers.get("x-fronde-draft-n-max") == "8", dict(r.headers)
    assert r.json()["timings"]["draft_n_max"] == 8, r.json()["timings"]
    assert router["load"]["draft_lengths"], router["load"]
