"""Shared fixtures: a fake llama-server executable, settings that serve gemma through it, and
headless Chromium for the /ui tests."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, sync_playwright

from fronde.config import Settings, load_settings
from fronde.runtime.models import load_profile

FAKE_SERVER = Path(__file__).parent / "fakes" / "fake_llama_server.py"


@pytest.fixture(scope="session")
def fake_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An executable that behaves like llama-server (see tests/fakes/fake_llama_server.py)."""
    exe = tmp_path_factory.mktemp("fake") / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVER}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


REPO_MODELS = Path(__file__).resolve().parents[1] / "models"


@pytest.fixture
def fake_gemma(tmp_path: Path, fake_binary: Path) -> Callable[[int], Settings]:
    """Settings for the gemma profile served by the fake at ``tps`` tokens a second.

    The GGUF is a sparse file of the manifest's size in ``tmp_path`` (the fake reads
    nothing of it), so no model is needed.
    """

    def settings(tps: int) -> Settings:
        return gemma_on_fake(
            tmp_path, fake_binary, backend={"extra_args": ["--fake-tps", str(tps)]}
        )

    return settings


def gemma_on_fake(tmp_path: Path, fake_binary: Path, **overrides: Any) -> Settings:
    """Settings for the gemma profile on the fake binary, with ``overrides``.

    The profile and a sparse GGUF of its manifest's size go to ``tmp_path``, which is also
    the models and cache folder, so :func:`~fronde.evidence.calibration.load_key` resolves.
    """
    shutil.copy(REPO_MODELS / "cpu-gemma-270m.toml", tmp_path)
    profile = load_profile(tmp_path, "cpu-gemma-270m")
    with (tmp_path / profile.target.file).open("wb") as f:
        f.truncate(profile.target.size or 1)
    return load_settings(
        models_dir=tmp_path,
        cache_dir=tmp_path,
        profile="cpu-gemma-270m",
        llama_server=fake_binary,
        **overrides,
    )


def cli_env(settings: Settings, cache_dir: Path) -> dict[str, str]:
    """The environment a ``python -m fronde`` child needs to run ``settings``' profile.

    Its models, its llama-server, the cache folder ``cache_dir`` and this checkout on the path.
    """
    return os.environ | {
        "FRONDE_MODELS_DIR": str(settings.models_dir),
        "FRONDE_CACHE_DIR": str(cache_dir),
        "FRONDE_LLAMA_SERVER": str(settings.llama_server),
        "FRONDE_PROFILE": settings.profile,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }


CHROMIUM_FLAGS = [
    # This machine's network is closed: without these Chromium keeps trying Google's hosts.
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    """Debian's Chromium, or the one FRONDE_CHROMIUM names; fails with what to install."""
    path = os.environ.get("FRONDE_CHROMIUM") or shutil.which("chromium")
    if path is None:
        pytest.fail("the browser test needs Chromium: `apt-get install chromium`")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium driven by Playwright, for the ``/ui`` tests (unit and real)."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        yield b
        b.close()
