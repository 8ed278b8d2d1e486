"""Fixtures that run the real `fronde serve`, llama-server b11434 and the gemma model.

They need `fronde install` and `fronde models fetch` to have run (scripts/test.sh
does both); without them the tests fail with that instruction, never skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from fronde.backends.process import free_port
from fronde.config import load_settings
from fronde.errors import FrondeError
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of
from fronde.runtime.models import model_path

SERVE_TIMEOUT_S = 240.0

ORIGINAL_POLICY = {
    "FRONDE_ROUTER__FLOOR": "baseline",
    "FRONDE_ROUTER__PROBE": "always",
    "FRONDE_ROUTER__PREDICT": "false",
}
"""The original FRONDE router's policy (floor baseline, probe every novel request, no
counterfactual prediction): the tests of the probe path set it, since the default
never probes a short answer."""

GEMMA = "cpu-gemma-270m"
"""The profile these tests run on unless one says otherwise: the base model the
completion-style prompts were written for (the default profile is the instruct one)."""
SMOLLM2 = "cpu-smollm2-135m"
"""The instruct model's profile, for the chat tests."""

_PROFILE_ENV = "FRONDE_PROFILE"
_saved: list[str | None] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Run each integration test (and the servers its fixtures start) on gemma."""
    del item
    _saved.append(os.environ.get(_PROFILE_ENV))
    os.environ[_PROFILE_ENV] = GEMMA


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Give the unit tests back the environment they had."""
    del item
    old = _saved.pop() if _saved else None
    if old is None:
        os.environ.pop(_PROFILE_ENV, None)
    else:
        os.environ[_PROFILE_ENV] = old


@dataclass
class Serve:
    """A running `fronde serve` child."""

    proc: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.base_url}/health", timeout=10).json()
        return body

    def backend_pids(self) -> list[int]:
        return [b["pid"] for b in self.health()["backends"].values() if b.get("pid")]

    def wait_all_ready(
        self, timeout_s: float = SERVE_TIMEOUT_S, settled: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"fronde serve exited {self.proc.returncode}: {self.log.read_text()[-2000:]}"
                )
            try:
                last = self.health()
                states = {b["state"] for b in last["backends"].values()}
                if states <= {"ready", "left-out", *settled}:
                    return last  # type: ignore[no-any-return]
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"not ready after {timeout_s} s: {last}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)


@contextlib.contextmanager
def patched_server(argv: list[str], log: Path, flag: str) -> Generator[str]:
    """Run the llama-server ``argv`` on a free port until ready; its base URL.

    Skips the test, saying so, unless its ``GET /props`` carries ``flag`` as true (the
    patch under test); the server is stopped when the block ends.
    """
    port = free_port()
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(port)], stdout=fh, stderr=fh
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        if httpx.get(base + "/props", timeout=10).json().get(flag) is not True:
            pytest.skip(
                f"{argv[0]} has no {flag} in /props: `fronde install` builds the patched "
                "llama-server (patches on by default)"
            )
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def require_real_parts() -> None:
    settings = load_settings()
    try:
        find_llama_binary(settings.cache_dir, settings.llama_server)
        model_path(settings.models_dir, profile_of(settings).target)
    except FrondeError as exc:
        pytest.fail(f"integration tests need the real parts: {exc.message}")


def start_serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Serve:
    """Start `fronde serve` on a free port with ``args`` and extra ``env``; wait until ready."""
    require_real_parts()
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    env = {**os.environ, "FRONDE_LOG_FORMAT": "json", **(env or {})}
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fronde", "serve", "--port", str(port), *args],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
        )
    serve = Serve(proc, f"http://127.0.0.1:{port}", log)
    swap = env.get("FRONDE_RESIDENCY") == "swap"
    serve.wait_all_ready(settled=frozenset({"stopped"}) if swap else frozenset())
    return serve


@pytest.fixture(scope="session")
def real_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One `fronde serve` on gemma, shared by the read-only tests."""
    serve = start_serve(tmp_path_factory.mktemp("serve"))
    yield serve
    serve.stop()


@pytest.fixture
def own_serve(tmp_path: Path) -> Iterator[Serve]:
    """A private `fronde serve` (two modes) for tests that kill things."""
    serve = start_serve(tmp_path, "--mode", "baseline", "--mode", "ngram-simple")
    yield serve
    if serve.proc.poll() is None:
        serve.stop(signal.SIGKILL)
