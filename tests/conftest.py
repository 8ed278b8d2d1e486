"""Shared fixtures: a fake llama-server executable for unit tests."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

FAKE_SERVER = Path(__file__).parent / "fakes" / "fake_llama_server.py"


@pytest.fixture(scope="session")
def fake_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An executable that behaves like llama-server (see tests/fakes/fake_llama_server.py)."""
    exe = tmp_path_factory.mktemp("fake") / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVER}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe
