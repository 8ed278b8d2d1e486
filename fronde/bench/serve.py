"""The children a benchmark starts, and what every run records.

`fronde serve` as a user runs it (:func:`running_serve`); LiteLLM's proxy in front of
one llama-server (the ``litellm`` arm), installed on first use (``litellm[proxy]``)
into its own venv under Fronde's cache; the run's machine and code (:func:`run_info`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import httpx

from fronde.errors import FrondeError
from fronde.serving import die_with_parent, free_port, log_tail

__all__ = [
    "LITELLM_MODEL", "LITELLM_SPEC", "MachineInfo", "RunInfo", "RunningServe", "child",
    "git_state", "litellm_proxy", "litellm_python", "machine_info", "run_info", "running_serve",
    "settled",
]  # fmt: skip


class MachineInfo(TypedDict):
    """What identifies a machine in a run record.

    CPU model, logical CPUs, GPU names (``nvidia-smi``), ``platform.platform()``, Python.
    """

    cpu: str
    cpus: int | None
    gpus: list[str]
    system: str
    python: str


class RunInfo(TypedDict):
    """What every run record holds.

    ``started_at`` (UTC, ``2026-12-03T13:02:11Z``), the machine, Linux's ``boot_id``
    and the checkout's ``commit`` and ``dirty`` flag (None outside a checkout).
    """

    started_at: str
    machine: MachineInfo
    boot_id: str | None
    commit: str | None
    dirty: bool | None


def run_info() -> RunInfo:
    """What every run records: when, the machine, and which code (commit, dirty flag).

    ``boot_id`` (None off Linux) tells a fresh lease of a GPU machine from the last one.
    """
    commit, dirty = git_state()
    try:
        boot: str | None = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = None
    return RunInfo(
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        machine=machine_info(),
        boot_id=boot,
        commit=commit,
        dirty=dirty,
    )


@dataclass(frozen=True)
class RunningServe:
    """A settled `fronde serve` child: its URL, each ready mode's llama-server URL, its log."""

    base_url: str
    backend_urls: dict[str, str]
    log: Path


def settled(health: dict[str, Any]) -> bool:
    """Whether every backend of a Fronde ``/health`` body has settled (none is starting).

    With swap residency a ``stopped`` mode is settled (not resident by design).

    Raises:
        KeyError: ``health`` has no ``backends`` (not a Fronde ``/health`` body).
    """
    states = {b["state"] for b in health["backends"].values()}
    unsettled = {"starting"} if health.get("residency") == "swap" else {"starting", "stopped"}
    return not states & unsettled


@contextlib.contextmanager
def child(
    name: str,
    argv: list[str],
    env: dict[str, str],
    log: Path,
    ready: Callable[[], bool],
    timeout_s: float,
) -> Generator[None]:
    """Run ``argv`` (output in ``log``) until ``ready()``; on exit SIGTERM, 30 s, SIGKILL.

    The child dies with the benchmark.

    Raises:
        FrondeError: it exited, or ``ready()`` was not true within ``timeout_s``
            (said of ``name``, with the last lines of its log).
    """
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None:
                raise FrondeError(f"{name} exited with {proc.returncode}: {log_tail(log, 4)}")
            if time.monotonic() > deadline:
                raise FrondeError(f"{name} not ready after {timeout_s:.0f} s: {log_tail(log, 4)}")
            time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_serve(
    config_file: Path | None,
    timeout_s: float = 240.0,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Generator[RunningServe]:
    """Start `fronde serve` on a free port, wait until it has settled, stop it on exit.

    ``env`` adds environment variables (``FRONDE_RESIDENCY=swap``).

    Raises:
        FrondeError: the child exited or was not ready within ``timeout_s`` seconds.
    """
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = Path(tempfile.mkstemp(prefix="fronde-bench-serve-", suffix=".log")[1])
    argv = [sys.executable, "-m", "fronde", "serve", "--port", str(port), *extra_args]
    argv += ["--config", str(config_file)] if config_file is not None else []
    health: dict[str, Any] = {}

    def ready() -> bool:
        with contextlib.suppress(httpx.TransportError, ValueError, KeyError):
            r = httpx.get(f"{base}/health", timeout=5)
            if r.status_code == 200 and settled(r.json()):
                health.update(r.json())
        return bool(health)

    full_env = {**os.environ, "FRONDE_LOG_FORMAT": "json", **(env or {})}
    with child("fronde serve", argv, full_env, log, ready, timeout_s):
        urls = {m: b["url"] for m, b in health["backends"].items() if b["state"] == "ready"}
        yield RunningServe(base, urls, log)


def git_state() -> tuple[str | None, bool | None]:
    """Return (commit, dirty) of the checkout Fronde runs from, or (None, None)."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return commit, dirty


def nvidia_smi_query(field: str) -> list[str]:
    """One ``nvidia-smi --query-gpu=FIELD`` value per GPU, no units; ``[]`` without one."""
    if not shutil.which("nvidia-smi"):
        return []
    argv = ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=20)
    except subprocess.TimeoutExpired:
        return []
    if done.returncode != 0:
        return []
    return [v.strip() for v in done.stdout.splitlines() if v.strip()]


def machine_line() -> str:
    """One line naming the machine: the GPU when ``nvidia-smi`` lists one, and the CPU."""
    info = machine_info()
    cpu = f"{info['cpu']} ({info['cpus']} CPUs)"
    gpus = info["gpus"]
    return f"{gpus[0]} (GPU ×{len(gpus)}), {cpu}" if gpus else cpu


def machine_info() -> MachineInfo:
    """Return what identifies the machine: CPU model, core count, GPUs, OS, Python."""
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return MachineInfo(
        cpu=cpu,
        cpus=os.cpu_count(),
        gpus=nvidia_smi_query("name"),
        system=platform.platform(),
        python=platform.python_version(),
    )


LITELLM_SPEC = "litellm[proxy]"
"""What the LiteLLM venv installs."""

LITELLM_MODEL = "fronde-bench"
"""The model name the proxy is configured with; requests through it must name it."""


def litellm_python(cache_dir: Path) -> Path:
    """The LiteLLM venv's Python, created and filled on first use.

    Raises:
        FrondeError: the install failed (no network, or PyPI refused).
    """
    venv = cache_dir / "litellm-venv"
    python = venv / "bin" / "python"
    if not (venv / "bin" / "litellm").is_file():
        print(f"installing {LITELLM_SPEC} into {venv} (first use, about a minute)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        out = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", LITELLM_SPEC],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise FrondeError(f"cannot install {LITELLM_SPEC}: {out.stderr.strip()[-300:]}")
    return python


@contextlib.contextmanager
def litellm_proxy(python: Path, backend_url: str, timeout_s: float = 120.0) -> Generator[str]:
    """Run LiteLLM's proxy (one worker, no database) for ``backend_url``; yield its URL.

    Raises:
        FrondeError: it exited, or did not answer within ``timeout_s``.
    """
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="fronde-litellm-"))
    config = folder / "config.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {LITELLM_MODEL}\n"
        "    litellm_params:\n"
        "      model: openai/bench\n"
        f"      api_base: {backend_url}/v1\n"
        "      api_key: none\n"
    )
    exe = python.parent / "litellm"
    argv = [str(exe), "--config", str(config), "--port", str(port), "--host", "127.0.0.1"]
    env = {
        **os.environ,
        "LITELLM_LOG": "ERROR",
        "DISABLE_SCHEMA_UPDATE": "true",
        # No key on either proxy (Fronde runs without api_keys here): loopback only.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with contextlib.suppress(httpx.TransportError):
            return httpx.get(f"{base}/health/liveliness", timeout=2).status_code == 200
        return False

    try:
        with child("litellm", argv, env, folder / "litellm.log", ready, timeout_s):
            yield base
    finally:
        shutil.rmtree(folder, ignore_errors=True)
