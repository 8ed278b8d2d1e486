"""One ``llama-server`` child process and its lifecycle.

States and what each method does in each of them (the llama-swap
``internal/process/process.go`` way of documenting a process)::

    state      start()                    stop()                wait()
    ---------  -------------------------  --------------------  ------------------
    STOPPED    spawn, poll /health        no-op                 returns at once
    STARTING   (not called: one owner)    kill group, STOPPED   waits for exit
    READY      error (already running)    SIGTERM group, grace  waits for exit
                                          SIGKILL, reap
    STOPPING   (not called)               (not called)          waits for exit
    FAILED     spawn again                no-op                 returns at once

A process is owned by one task at a time (the pool's supervisor for its mode), so
no locking is needed. The child runs in its own session, hence its own process
group: stopping it signals the whole group, and a Ctrl-C in the terminal of
`fronde serve` reaches Fronde only, which then stops its children in order. On
Linux the child also gets ``PR_SET_PDEATHSIG`` = SIGKILL, so even a SIGKILLed
Fronde leaves no llama-server behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

import httpx

from fronde.errors import BackendStartError
from fronde.logging import get_logger
from fronde.modes import Mode

__all__ = [
    "NO_CACHE_IDLE_SLOTS",
    "UNKNOWN_FLAG_SETTINGS",
    "BackendState",
    "LaunchSpec",
    "LlamaServerProcess",
    "die_with_parent",
    "free_port",
    "log_tail",
    "start_hint",
]

log = get_logger(__name__)

HEALTH_POLL_S = 0.2
"""Interval between two /health polls while a backend loads, seconds."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class BackendState(StrEnum):
    """Lifecycle state of a llama-server process (see the module docstring)."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    FAILED = "failed"


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one backend.

    Attributes:
        mode: the decoding mode this process serves (or, for the battery, a
            config's name such as ``ngram-mod-6``).
        binary: the llama-server executable.
        args: argv after the binary, without ``--host``/``--port`` (chosen at start).
        log_path: file receiving the child's stdout and stderr.
        host: loopback address the child binds to.
    """

    mode: Mode | str
    binary: Path
    args: list[str]
    log_path: Path
    host: str = "127.0.0.1"


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` a moment ago.

    The port is released before llama-server binds it, so another process may take
    it first; the child then exits early and the start fails fast (and the pool
    retries with a new port).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = 8, max_bytes: int = 8192) -> str:
    """Return the last ``lines`` lines of ``path`` (empty if unreadable), joined by `` | ``."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - max_bytes))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return " | ".join(ln.strip() for ln in text.splitlines()[-lines:] if ln.strip())


NO_CACHE_IDLE_SLOTS = "--no-cache-idle-slots"
"""llama-server's flag (b11434 ``common/arg.cpp``) that stops it saving every idle slot
to its prompt cache at each new task. On (its default), ``process_single_task`` calls
``prompt_save`` for every idle slot after launching a task
(``tools/server/server-context.cpp``, ``cache_idle_slots``): each one sizes its slot's
KV state and compares its tokens with every cached prompt, and one not cached yet is
copied to host memory, all before the step that starts the new task, with every slot
waiting. In the H100 logs of ``results/load-gpu-h100-cpu-gemma-270m-20261207-agent-fresh-gap``
(gemma, 32 slots) a task's start waited 0.3-0.4 ms on the pinned server, whose 8 clients
used 9 slots, and 5-8 ms (medians) under Fronde, whose requests had used all 32: 0.5-1.2
ms with 0-3 idle slots holding a prompt, 6-8 ms with 24-31. Off, a slot's state is
still saved when a request is about to overwrite it (``get_available_slot``)."""

UNKNOWN_FLAG_SETTINGS = {NO_CACHE_IDLE_SLOTS: "backend.cache_idle_slots = true"}
"""Flags Fronde adds to every llama-server that an older build may not know, and the setting
that leaves each out."""


def start_hint(tail: str) -> str:
    """What to change when a llama-server stopped at a flag it does not know ("" otherwise).

    ``tail``: the end of its log (:func:`log_tail`); llama.cpp's argument parser prints
    ``error: invalid argument: FLAG`` (``common/arg.cpp``).
    """
    for flag, setting in UNKNOWN_FLAG_SETTINGS.items():
        if f"invalid argument: {flag}" in tail:
            return f"; this llama-server does not know {flag}: set {setting}"
    return ""


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``preexec_fn`` for Linux: the child gets SIGKILL when its parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class LlamaServerProcess:
    """A supervised llama-server child serving one mode on a loopback port.

    Attributes:
        spec: how to launch it.
        start_timeout_s: deadline for ``/health`` to answer 200, seconds.
        stop_grace_s: wait between SIGTERM and SIGKILL, seconds.
        state: current :class:`BackendState`.
        port: TCP port of the running child, or None.
        last_error: why the last start or run failed, or None.
        starts: how many times the child was spawned.
    """

    spec: LaunchSpec
    start_timeout_s: float = 180.0
    stop_grace_s: float = 5.0
    state: BackendState = BackendState.STOPPED
    port: int | None = None
    last_error: str | None = None
    starts: int = 0
    _proc: asyncio.subprocess.Process | None = field(default=None, repr=False)

    @property
    def mode(self) -> Mode | str:
        """The mode (or battery config) this backend serves."""
        return self.spec.mode

    @property
    def url(self) -> str:
        """Base URL of the child, e.g. ``http://127.0.0.1:41234``.

        Raises:
            RuntimeError: the child has no port (never started).
        """
        if self.port is None:
            raise RuntimeError(f"backend {self.mode} has no port")
        return f"http://{self.spec.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the child (also its process group id), or None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status of the child once it exited, else None."""
        return self._proc.returncode if self._proc is not None else None

    async def start(self) -> None:
        """Spawn the child and wait until ``/health`` answers 200.

        Raises:
            BackendStartError: the child exited early (the message carries the last
                lines of its log), or missed the health deadline (it is then killed).
            RuntimeError: the process is already running.
        """
        if self.state in (BackendState.STARTING, BackendState.READY, BackendState.STOPPING):
            raise RuntimeError(f"backend {self.mode} is {self.state}")
        self.state = BackendState.STARTING
        self.port = free_port(self.spec.host)
        argv = [
            str(self.spec.binary),
            *self.spec.args,
            "--host",
            self.spec.host,
            "--port",
            str(self.port),
        ]
        self.spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.spec.log_path.open("ab") as log_fh:
            log_fh.write(f"\n# fronde: starting {' '.join(argv)}\n".encode())
            log_fh.flush()
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log_fh,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent if sys.platform == "linux" else None,
                )
            except OSError as exc:
                self.state = BackendState.FAILED
                self.last_error = f"cannot execute {self.spec.binary}: {exc}"
                raise BackendStartError(self.last_error) from exc
        self.starts += 1
        log.info("backend.starting", mode=str(self.mode), pid=self._proc.pid, port=self.port)
        t0 = time.monotonic()
        try:
            await self._wait_healthy(t0 + self.start_timeout_s)
        except BackendStartError as exc:
            self.last_error = exc.message
            await self._kill_group()
            self.state = BackendState.FAILED
            raise
        except BaseException:
            # Cancelled while loading (e.g. Fronde is shutting down): leave no child.
            await self._kill_group()
            self.state = BackendState.STOPPED
            raise
        self.state = BackendState.READY
        self.last_error = None
        log.info(
            "backend.started",
            mode=str(self.mode),
            pid=self._proc.pid,
            url=self.url,
            load_s=round(time.monotonic() - t0, 2),
        )

    async def _wait_healthy(self, deadline: float) -> None:
        assert self._proc is not None  # noqa: S101 - set by start()
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                if self._proc.returncode is not None:
                    tail = log_tail(self.spec.log_path)
                    raise BackendStartError(
                        f"llama-server ({self.mode}) exited with status {self._proc.returncode} "
                        f"while loading: {tail}{start_hint(tail)}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    resp = await http.get(f"{self.url}/health")
                    if resp.status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise BackendStartError(
                        f"llama-server ({self.mode}) not healthy after {self.start_timeout_s:.0f} s"
                        f": {log_tail(self.spec.log_path)}"
                    )
                await asyncio.sleep(HEALTH_POLL_S)

    async def wait(self) -> int | None:
        """Wait for the child to exit; return its status (None if it never ran)."""
        if self._proc is None:
            return None
        return await self._proc.wait()

    async def stop(self) -> None:
        """Stop the child: SIGTERM its group, wait ``stop_grace_s``, SIGKILL, reap.

        Safe to call in any state; returns once no process of the group is left.
        """
        if self._proc is None or self._proc.returncode is not None:
            self.state = BackendState.STOPPED
            return
        self.state = BackendState.STOPPING
        await self._kill_group()
        self.state = BackendState.STOPPED
        log.info("backend.stopped", mode=str(self.mode), returncode=self.returncode)

    async def _kill_group(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        pgid = proc.pid  # start_new_session=True: the child leads its own group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=self.stop_grace_s)
        except TimeoutError:
            log.warning("backend.kill", mode=str(self.mode), pid=pgid, after_s=self.stop_grace_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            await proc.wait()
        # Reap any straggler of the group (llama-server spawns none today).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
