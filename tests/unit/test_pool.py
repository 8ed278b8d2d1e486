"""BackendPool: planning from a profile, left-out modes, crash restart, stop."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from fronde.backends.pool import BackendPool, PoolPlan, plan_pool
from fronde.backends.process import BackendState, LaunchSpec
from fronde.config import load_settings
from fronde.errors import (
    BackendUnavailableError,
    ManifestError,
    ModelMissingError,
    ModeUnavailableError,
)
from fronde.modes import Mode
from fronde.runtime.models import load_profile

from ..procs import alive

REPO_MODELS = Path(__file__).resolve().parents[2] / "models"
pytestmark = pytest.mark.anyio


def _sparse_gguf(folder: Path, size: int) -> None:
    """A stand-in GGUF of the manifest's size (sparse: no disk used)."""
    with (folder / "gemma-3-270m-q4_k_m.gguf").open("wb") as f:
        f.truncate(size)


def test_plan_leaves_out_draft_without_draft_model(tmp_path: Path) -> None:
    profile = load_profile(REPO_MODELS, "cpu-gemma-270m")
    _sparse_gguf(tmp_path, profile.target.size or 1)
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path)
    plan = plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path)
    assert set(plan.specs) == {Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD, Mode.CASCADE}
    assert "no draft model" in plan.left_out[Mode.DRAFT]
    mod = plan.specs[Mode.NGRAM_MOD].args
    assert mod[mod.index("--spec-type") + 1] == "ngram-mod"
    assert mod[mod.index("--spec-ngram-mod-n-match") + 1] == "24"
    cascade = plan.specs[Mode.CASCADE].args
    assert cascade[cascade.index("--spec-type") + 1] == "ngram-simple,ngram-mod"
    tpl = mod.index("--chat-template-file")
    assert mod[tpl - 1] == "--jinja"
    assert Path(mod[tpl + 1]).read_text().count("<start_of_turn>") >= 2
    assert mod[mod.index("--alias") + 1] == "fronde"
    assert "--spec-type" not in plan.specs[Mode.BASELINE].args


@pytest.mark.parametrize(("parallel", "threads"), [(1, 68), (32, 192)])
def test_every_server_gets_a_fixed_http_thread_for_each_connection_fronde_opens(
    tmp_path: Path, parallel: int, threads: int
) -> None:
    # b11434's default (max(np + 4, cores - 1)) let a burst of connections wait seconds
    # for a thread (fronde/backends/connections.py); a user's own value comes later, and wins.
    profile = load_profile(REPO_MODELS, "cpu-gemma-270m")
    _sparse_gguf(tmp_path, profile.target.size or 1)
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path)
    backend = settings.backend.model_copy(update={"parallel": parallel})
    plan = plan_pool(
        settings.model_copy(update={"backend": backend}),
        profile,
        Path("/bin/llama-server"),
        tmp_path,
    )
    for spec in plan.specs.values():
        assert spec.args[spec.args.index("--threads-http") + 1] == str(threads)
    own = backend.model_copy(update={"extra_args": ["--threads-http", "500"]})
    args = (
        plan_pool(
            settings.model_copy(update={"backend": own}),
            profile,
            Path("/bin/llama-server"),
            tmp_path,
        )
        .specs[Mode.BASELINE]
        .args
    )
    flags = [i for i, a in enumerate(args) if a == "--threads-http"]
    assert [args[i + 1] for i in flags] == [str(threads), "500"]


def test_a_builtin_template_name_turns_jinja_off(tmp_path: Path) -> None:
    profile = load_profile(REPO_MODELS, "cpu-gemma-270m").model_copy(
        update={"chat_template": "gemma"}
    )
    _sparse_gguf(tmp_path, profile.target.size or 1)
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path)
    args = (
        plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path).specs[Mode.BASELINE].args
    )
    assert args[args.index("--chat-template") - 1 : args.index("--chat-template") + 2] == [
        "--no-jinja",
        "--chat-template",
        "gemma",
    ]


def test_a_missing_template_file_is_a_manifest_error(tmp_path: Path) -> None:
    profile = load_profile(REPO_MODELS, "cpu-gemma-270m").model_copy(
        update={"chat_template": "nowhere.jinja"}
    )
    _sparse_gguf(tmp_path, profile.target.size or 1)
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path)
    with pytest.raises(ManifestError, match=r"nowhere\.jinja"):
        plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path)


def test_plan_without_target_says_fetch(tmp_path: Path) -> None:
    profile = load_profile(REPO_MODELS, "cpu-gemma-270m")
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path)
    with pytest.raises(ModelMissingError, match=r"run `fronde models fetch cpu-gemma-270m`$"):
        plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path)


def test_a_missing_draft_model_is_a_warning_no_draft_model_is_information(
    tmp_path: Path,
) -> None:
    """The profile without a draft model is the usual case; a draft not fetched is a fault."""
    gpu = load_profile(REPO_MODELS, "gpu-qwen3-8b")
    (tmp_path / gpu.target.file).write_bytes(b"gguf")  # the draft's file is not there
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path)
    missing = plan_pool(settings, gpu, Path("/bin/llama-server"), tmp_path)
    assert missing.missing == {Mode.DRAFT}
    assert missing.left_out[Mode.DRAFT].endswith("run `fronde models fetch gpu-qwen3-8b`")
    cpu = load_profile(REPO_MODELS, "cpu-gemma-270m")
    _sparse_gguf(tmp_path, cpu.target.size or 1)
    by_design = plan_pool(settings, cpu, Path("/bin/llama-server"), tmp_path)
    assert by_design.missing == frozenset()
    with capture_logs() as logs:
        BackendPool(missing)
        BackendPool(by_design)
    left = [(e["log_level"], e["reason"]) for e in logs if e["event"] == "backend.left_out"]
    assert left == [
        ("warning", missing.left_out[Mode.DRAFT]),
        ("info", by_design.left_out[Mode.DRAFT]),
    ]


def test_plan_gpu_profile_uses_the_draft_model(tmp_path: Path) -> None:
    profile = load_profile(REPO_MODELS, "gpu-qwen3-8b")
    for m in profile.models:
        (tmp_path / m.file).write_bytes(b"gguf")
    settings = load_settings(models_dir=tmp_path, cache_dir=tmp_path)
    plan = plan_pool(settings, profile, Path("/bin/llama-server"), tmp_path)
    args = plan.specs[Mode.DRAFT].args
    assert args[args.index("--spec-draft-model") + 1] == str(tmp_path / "Qwen3-0.6B-Q8_0.gguf")
    assert args[args.index("--spec-type") + 1] == "draft-simple"
    assert "-ngl" in args


def fake_plan(binary: Path, tmp_path: Path, modes: list[Mode]) -> PoolPlan:
    specs = {
        m: LaunchSpec(m, binary, ["--spec-type", str(m)], tmp_path / f"{m}.log") for m in modes
    }
    return PoolPlan(specs, {Mode.DRAFT: "no draft model"})


async def test_crashed_backend_is_restarted(fake_binary: Path, tmp_path: Path) -> None:
    pool = BackendPool(fake_plan(fake_binary, tmp_path, [Mode.NGRAM_MOD]), stop_grace_s=1.0)
    await pool.start()
    try:
        first = pool.get(Mode.NGRAM_MOD)
        old_pid = first.pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        for _ in range(200):  # the supervisor notices, backs off 1 s, restarts
            await asyncio.sleep(0.1)
            if pool.restarts[Mode.NGRAM_MOD] and first.state is BackendState.READY:
                break
        assert first.state is BackendState.READY
        assert first.pid != old_pid
        assert pool.restarts[Mode.NGRAM_MOD] == 1
    finally:
        await pool.stop()


async def test_a_stopped_modes_supervisor_is_forgotten(fake_binary: Path, tmp_path: Path) -> None:
    """Swap residency starts and stops modes all day: finished supervisors must go."""
    pool = BackendPool(fake_plan(fake_binary, tmp_path, [Mode.BASELINE]), stop_grace_s=1.0)
    await pool.start()
    try:
        for _ in range(3):
            await pool.stop_mode(Mode.BASELINE)
            await pool.start_mode(Mode.BASELINE)
        for _ in range(50):  # the stopped modes' supervisors end on their next check
            if len(pool._supervisors) == 1:  # pyright: ignore[reportPrivateUsage]
                break
            await asyncio.sleep(0.1)
        assert len(pool._supervisors) == 1  # pyright: ignore[reportPrivateUsage]
    finally:
        await pool.stop()


async def test_get_explains_unknown_and_unready_modes(fake_binary: Path, tmp_path: Path) -> None:
    pool = BackendPool(fake_plan(fake_binary, tmp_path, [Mode.BASELINE]))
    with pytest.raises(ModeUnavailableError, match="no draft model"):
        pool.get(Mode.DRAFT)
    with pytest.raises(BackendUnavailableError, match="stopped"):
        pool.get(Mode.BASELINE)  # not started yet


async def test_stop_leaves_no_child(fake_binary: Path, tmp_path: Path) -> None:
    pool = BackendPool(fake_plan(fake_binary, tmp_path, [Mode.BASELINE, Mode.NGRAM_SIMPLE]))
    await pool.start()
    pids = pool.pids()
    assert len(pids) == 2
    await pool.stop()
    assert not any(alive(p) for p in pids)
    assert pool.pids() == []
