"""Run `fronde serve` as its own process for a benchmark, as a user runs it."""

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
    "MachineInfo",
    "RunInfo",
    "RunningServe",
    "child",
    "git_state",
    "machine_info",
    "run_info",
    "running_serve",
    "settled",
]


class MachineInfo(TypedDict):
    """What identifies a machine in a run record (:func:`machine_info`).

    Attributes:
        cpu: the CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``).
        cpus: logical CPUs (``os.cpu_count()``; None when unknown).
        gpus: the GPUs ``nvidia-smi`` lists, by name (``[]`` without one).
        system: ``platform.platform()`` (the kernel's build in it).
        python: the Python version.
    """

    cpu: str
    cpus: int | None
    gpus: list[str]
    system: str
    python: str


class RunInfo(TypedDict):
    """What every run record holds (:func:`run_info`).

    Attributes:
        started_at: UTC, ``2026-12-03T13:02:11Z``.
        machine: the machine (:class:`MachineInfo`).
        boot_id: Linux's boot id, None elsewhere.
        commit, dirty: the checkout's commit and whether tracked files changed
            (None, None outside a git checkout).
    """

    started_at: str
    machine: MachineInfo
    boot_id: str | None
    commit: str | None
    dirty: bool | None


def run_info() -> RunInfo:
    """What every run records: when, the machine, and which code (commit, dirty flag).

    ``boot_id`` (Linux's ``/proc/sys/kernel/random/boot_id``, None elsewhere) tells
    one boot of a machine from another of the same class: runs resumed on a fresh
    lease of a GPU machine are another measuring session (``fronde bench load``
    compares arms within one).
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
    """A `fronde serve` child that answered /health with every backend settled.

    Attributes:
        base_url: e.g. ``http://127.0.0.1:41234``.
        backend_urls: mode name → that mode's llama-server URL (ready ones only).
        log: the child's log file.
    """

    base_url: str
    backend_urls: dict[str, str]
    log: Path


def settled(health: dict[str, Any]) -> bool:
    """Whether every backend of a Fronde ``/health`` body has settled (none is starting).

    With swap residency (``health["residency"] == "swap"``, whatever set it: flag,
    environment or config file) a mode that is not resident is ``stopped`` by design
    and counts as settled; otherwise a ``stopped`` mode is still to come up.

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
    """Run ``argv`` (its output in ``log``) until ``ready()``; stop it on exit.

    The child dies with the benchmark (its own children follow it the same way). On
    exit: SIGTERM, up to 30 s, then SIGKILL.

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

    ``env`` adds environment variables (settings such as ``FRONDE_RESIDENCY=swap``).

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
    """One ``nvidia-smi --query-gpu=FIELD`` value per GPU, no header, no units.

    Returns ``[]`` without ``nvidia-smi``, without a GPU, or when it fails.
    """
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
