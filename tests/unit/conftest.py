"""Fixtures shared by the unit tests: Fronde apps over fake llama-server backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fronde.modes import Mode

from .test_contract import make_client, ready


@pytest.fixture
def serve(fake_binary: Path, tmp_path: Path) -> Iterator[Any]:
    """Factory: ``serve(knobs, **settings)`` → a ready TestClient, closed at teardown."""
    opened: list[TestClient] = []

    def factory(knobs: dict[Mode, list[str]] | None = None, **overrides: Any) -> TestClient:
        c = make_client(fake_binary, tmp_path / str(len(opened)), knobs, **overrides)
        (tmp_path / str(len(opened))).mkdir(exist_ok=True)
        opened.append(c)
        c.__enter__()
        return ready(c)

    yield factory
    for c in opened:
        c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def plain(fake_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One shared server with no faults, for the read-only checks."""
    folder = tmp_path_factory.mktemp("plain")
    with make_client(fake_binary, folder, server={"sse_keepalive_s": 0.05}) as c:
        yield ready(c)
