"""`fronde install`'s command line: which patches it applied, a stock build, a patch that
fails in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fronde.runtime import install as inst
from fronde.runtime import patches as pt

from .test_install import put_fake_sdist
from .test_install_patches import cmake_on_path


def test_install_cli_says_which_patches_or_that_the_build_is_stock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cmake_on_path(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    put_fake_sdist(cache)
    env_cache = {"FRONDE_CACHE_DIR": str(cache)}

    def fronde(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **env_cache}
        return subprocess.run(
            [sys.executable, "-m", "fronde", "install", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    # The real patch set against the fake sdist's one-line tree: the first patch fails,
    # in one line that names it, and nothing is built.
    r = fronde()
    first = pt.load_patch_set(inst.PATCH_DIR).names[0]
    assert r.returncode == 1
    assert re.search(rf"fronde: error: patch {re.escape(first)} does not apply", r.stderr)
    assert "Traceback" not in r.stderr
    r = fronde("--no-patches")
    assert r.returncode == 0, r.stderr
    assert "no patches: stock llama.cpp b11434" in r.stderr
