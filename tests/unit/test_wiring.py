"""Defects found by reading the wiring (issue 19, item 4), each pinned by a test."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import tomli_w
from fastapi.testclient import TestClient

from fronde.backends.client import BackendClient
from fronde.backends.pool import BackendPool
from fronde.backends.props import PropsCache
from fronde.bench.serve import running_serve, settled
from fronde.client_request import CompletionRequest
from fronde.config import load_settings
from fronde.errors import BackendUnavailableError
from fronde.modes import Mode
from fronde.request import Dispatcher, run_batch
from fronde.router.engine import Router

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"


def health(residency: str, **states: str) -> dict[str, Any]:
    return {"residency": residency, "backends": {m: {"state": s} for m, s in states.items()}}


def test_stopped_modes_are_settled_only_under_swap_residency() -> None:
    assert settled(health("swap", baseline="ready", **{"ngram-mod": "stopped"}))
    assert not settled(health("resident", baseline="ready", **{"ngram-mod": "stopped"}))
    assert not settled(health("swap", baseline="starting", **{"ngram-mod": "stopped"}))
    assert settled(health("resident", baseline="ready", draft="left-out"))


def test_health_says_the_residency(plain: TestClient) -> None:
    assert plain.get("/health").json()["residency"] == "resident"


def test_a_bench_server_with_swap_set_in_a_config_file_settles(
    tmp_path: Path, fake_binary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swap residency named only in the config file: the bench must not wait 240 s."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(REPO_MODELS / "cpu-gemma-270m.toml", models)
    with (models / "gemma-3-270m-q4_k_m.gguf").open("wb") as f:
        f.truncate(253_113_024)  # a sparse stand-in of the manifest's size
    cfg = tmp_path / "fronde.toml"
    cfg.write_text(
        tomli_w.dumps(
            {
                "llama_server": str(fake_binary),
                "models_dir": str(models),
                "cache_dir": str(tmp_path / "cache"),
                "modes": ["baseline", "ngram-mod"],
                "profile": "cpu-gemma-270m",
                "residency": "swap",
                "swap": {"max_resident": 1},
            }
        )
    )
    for name in [k for k in os.environ if k.startswith("FRONDE_")]:
        monkeypatch.delenv(name)  # the file alone says swap
    with running_serve(cfg, timeout_s=30) as serve:
        assert set(serve.backend_urls) == {"baseline"}  # the other mode waits, stopped


class BrokenPool:
    """A pool whose one backend is ready but cannot be reached: ``get`` raises a bug."""

    def __init__(self, ready: list[Mode]) -> None:
        self.props = PropsCache()
        self.backends = dict.fromkeys(Mode, None)
        self._ready = ready

    def ready_modes(self) -> list[Mode]:
        return self._ready

    def get(self, mode: Mode) -> Any:
        raise RuntimeError("a bug, not a client leaving")


def dispatcher(ready: list[Mode]) -> Dispatcher:
    pool = cast("BackendPool", BrokenPool(ready))
    client = BackendClient(httpx.AsyncClient())
    return Dispatcher(load_settings(), pool, client, Router())


@pytest.mark.anyio
async def test_an_internal_error_ends_the_request_as_an_error_not_cancelled() -> None:
    d = dispatcher([Mode.BASELINE])
    body = {"prompt": "x", "max_tokens": 4}
    with pytest.raises(RuntimeError):
        await d.answer("text", CompletionRequest.model_validate(body), "baseline")
    [row] = d.router.snapshot()["recent"]
    assert (row["status"], row["error"]) == ("error", "internal error: RuntimeError")
    assert not d.router.gate.locked()  # and its decode slot is free again


@pytest.mark.anyio
async def test_a_batch_with_no_backend_ready_answers_503_like_a_single_request() -> None:
    d = dispatcher([])
    answer = await run_batch(d, [("text", CompletionRequest(prompt="x", max_tokens=4))])
    [item] = answer["data"]
    assert item["status"] == 503
    with pytest.raises(BackendUnavailableError) as single:
        await d.answer("text", CompletionRequest(prompt="x", max_tokens=4), None)
    assert single.value.status_code == 503
