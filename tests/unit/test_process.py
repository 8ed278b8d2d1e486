"""LlamaServerProcess against the fake llama-server: start, health, early exit, stop."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from fronde.backends.process import BackendState, LaunchSpec, LlamaServerProcess
from fronde.errors import BackendStartError
from fronde.modes import Mode

from ..procs import alive

pytestmark = pytest.mark.anyio


def make(
    fake_binary: Path, tmp_path: Path, *knobs: str, timeout: float = 20.0
) -> LlamaServerProcess:
    spec = LaunchSpec(
        Mode.NGRAM_SIMPLE, fake_binary, ["--spec-type", "ngram-simple", *knobs], tmp_path / "b.log"
    )
    return LlamaServerProcess(spec, start_timeout_s=timeout, stop_grace_s=1.0)


async def test_start_waits_for_health_then_serves(fake_binary: Path, tmp_path: Path) -> None:
    proc = make(fake_binary, tmp_path, "--fake-load-s", "1.0")
    t0 = time.monotonic()
    await proc.start()
    try:
        assert time.monotonic() - t0 >= 1.0  # waited out the 503s
        assert proc.state is BackendState.READY
        async with httpx.AsyncClient() as http:
            r = await http.get(f"{proc.url}/health")
        assert r.status_code == 200
    finally:
        await proc.stop()
    assert proc.state is BackendState.STOPPED
    assert proc.pid is not None and not alive(proc.pid)


async def test_early_exit_fails_fast_with_log_tail(fake_binary: Path, tmp_path: Path) -> None:
    proc = make(fake_binary, tmp_path, "--fake-exit-on-start", "3", timeout=60)
    t0 = time.monotonic()
    with pytest.raises(BackendStartError, match=r"exited with status 3.*refusing to start"):
        await proc.start()
    assert time.monotonic() - t0 < 20  # did not wait for the 60 s deadline
    assert proc.state is BackendState.FAILED


async def test_a_flag_the_binary_does_not_know_names_the_setting(tmp_path: Path) -> None:
    # llama.cpp's parser on an unknown flag: one line on stderr, status 1 (common/arg.cpp).
    binary = tmp_path / "old-llama-server"
    binary.write_text(
        '#!/bin/sh\necho "error: invalid argument: --no-cache-idle-slots" >&2\nexit 1\n'
    )
    binary.chmod(0o755)
    spec = LaunchSpec(Mode.BASELINE, binary, ["--no-cache-idle-slots"], tmp_path / "b.log")
    proc = LlamaServerProcess(spec, start_timeout_s=20.0, stop_grace_s=1.0)
    with pytest.raises(BackendStartError, match=r"set backend\.cache_idle_slots = true"):
        await proc.start()


def test_a_start_hint_only_for_a_flag_fronde_adds() -> None:
    from fronde.backends.process import NO_CACHE_IDLE_SLOTS, UNKNOWN_FLAG_SETTINGS, start_hint

    assert NO_CACHE_IDLE_SLOTS in UNKNOWN_FLAG_SETTINGS
    assert start_hint("error: invalid argument: --no-such-flag") == ""
    assert start_hint("model loaded | listening") == ""


async def test_health_deadline_kills_the_child(fake_binary: Path, tmp_path: Path) -> None:
    proc = make(fake_binary, tmp_path, "--fake-load-s", "600", timeout=2.0)
    with pytest.raises(BackendStartError, match="not healthy after"):
        await proc.start()
    assert proc.pid is not None and not alive(proc.pid)


async def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(
    fake_binary: Path, tmp_path: Path
) -> None:
    proc = make(fake_binary, tmp_path, "--fake-ignore-sigterm")
    await proc.start()
    pid = proc.pid
    assert pid is not None
    t0 = time.monotonic()
    await proc.stop()
    took = time.monotonic() - t0
    assert not alive(pid)
    assert took >= 1.0  # the grace period was waited out
    assert proc.returncode == -9


async def test_missing_binary_is_a_start_error(tmp_path: Path) -> None:
    spec = LaunchSpec(Mode.BASELINE, tmp_path / "nope", [], tmp_path / "b.log")
    with pytest.raises(BackendStartError, match="cannot execute"):
        await LlamaServerProcess(spec).start()
