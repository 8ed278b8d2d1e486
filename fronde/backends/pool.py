"""The pool: one supervised llama-server per mode, restarted when it crashes.

The pool owns the backends. Each started backend has one supervisor task that
waits for the child to exit and, unless the pool is stopping, restarts it with
exponential back-off, up to ``max_restarts`` within ``restart_window_s``; past
that the mode is marked failed and left out. A mode whose model is missing (the
draft mode on a profile without a draft model) is never started; it is listed in
:attr:`BackendPool.left_out` with the reason, for ``/health`` and ``/v1/models``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fronde.backends.process import BackendState, LaunchSpec, LlamaServerProcess, log_tail
from fronde.backends.remote import RemoteMode
from fronde.config import Settings
from fronde.errors import (
    BackendStartError,
    BackendUnavailableError,
    ModelError,
    ModeUnavailableError,
)
from fronde.logging import get_logger
from fronde.modes import Mode, mode_args
from fronde.runtime.models import Profile, chat_template_file, model_path

__all__ = ["Backend", "BackendPool", "PoolPlan", "plan_pool"]

log = get_logger(__name__)

RESTART_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Wait before the n-th consecutive restart of a crashed backend, seconds."""


@dataclass(frozen=True)
class PoolPlan:
    """What to start: a launch spec per local mode, remote URLs, the modes left out with why.

    ``missing`` names the left-out modes whose model should be on disk and is not (a
    warning: fetch it); the others are left out by design (a profile without a draft
    model), which is information, not a fault.
    """

    specs: dict[Mode, LaunchSpec]
    left_out: dict[Mode, str]
    remote: dict[Mode, list[str]] = field(default_factory=dict[Mode, list[str]])
    missing: frozenset[Mode] = frozenset()


Backend = LlamaServerProcess | RemoteMode
"""A mode's backend: a local llama-server child, or remote replicas."""


def plan_pool(settings: Settings, profile: Profile, binary: Path, log_dir: Path) -> PoolPlan:
    """Turn settings and a profile into one :class:`LaunchSpec` per runnable mode.

    Args:
        settings: Fronde settings (modes, backend and speculation parameters).
        profile: the model profile (target, optional draft, extra server args).
        binary: the llama-server executable.
        log_dir: folder for the children's logs, one ``<mode>.log`` each.

    Returns:
        The plan. The draft mode is left out when the profile has no draft model
        or its file is missing.

    Raises:
        ModelMissingError: the target model is not on disk (no mode could run).
    """
    b = settings.backend
    specs: dict[Mode, LaunchSpec] = {}
    left_out: dict[Mode, str] = {}
    missing: set[Mode] = set()
    remote = {m: urls for m, urls in settings.remote.items() if m in settings.modes}
    if all(m in remote for m in settings.modes):
        return PoolPlan(specs, left_out, remote)  # a proxy-only host needs no model
    target = model_path(settings.models_dir, profile.target, profile.name)
    common = [
        "-m",
        str(target),
        "-c",
        str(b.ctx_size),
        "-t",
        str(b.threads),
        "-np",
        str(b.parallel),
    ]
    # --alias: responses carry the public model name, never the GGUF's path.
    common += ["--alias", settings.public_model, "--metrics", "--no-webui"]
    if profile.chat_template:
        template_file = chat_template_file(profile.chat_template, settings.models_dir)
        if template_file is not None:
            # Jinja on (b11434's default), so tools and response_format reach
            # llama.cpp's chat handlers.
            common += ["--jinja", "--chat-template-file", str(template_file)]
        else:
            # A built-in template name only works with Jinja off: under Jinja the
            # name itself ("gemma") would be rendered as the template text.
            common += ["--no-jinja", "--chat-template", profile.chat_template]
    if b.n_gpu_layers is not None:
        common += ["-ngl", str(b.n_gpu_layers)]
    common += [*profile.server_args, *b.extra_args]
    for mode in settings.modes:
        if mode in remote:
            continue
        draft: Path | None = None
        if mode is Mode.DRAFT:
            if profile.draft is None:
                left_out[mode] = (
                    "no --draft given (fronde serve --model M.gguf --draft D.gguf)"
                    if profile.is_local
                    else f"profile {profile.name} has no draft model sharing the target's "
                    "vocabulary"
                )
                continue
            try:
                draft = model_path(settings.models_dir, profile.draft, profile.name)
            except ModelError as exc:
                left_out[mode] = exc.message
                missing.add(mode)
                continue
        args = [*common, *mode_args(mode, settings.speculation, draft)]
        if mode is Mode.BASELINE:
            args += b.plain_args
        specs[mode] = LaunchSpec(mode, binary, args, log_dir / f"{mode}.log")
    return PoolPlan(specs, left_out, remote, frozenset(missing))


def _slots_of(args: list[str]) -> int:
    """The ``-np`` an argv gives llama-server (its last one wins, as there); 1 without one."""
    slots = 1
    for flag, value in itertools.pairwise(args):
        if flag in ("-np", "--parallel") and value.isdigit():
            slots = int(value)
    return slots


class BackendPool:
    """Starts, supervises and stops one llama-server per planned mode.

    Args:
        plan: from :func:`plan_pool`.
        start_timeout_s: per-start health deadline, seconds.
        stop_grace_s: SIGTERM to SIGKILL grace, seconds.
        max_restarts: restarts allowed per mode within ``restart_window_s``.
        restart_window_s: the window, seconds.
    """

    def __init__(
        self,
        plan: PoolPlan,
        *,
        start_timeout_s: float = 180.0,
        stop_grace_s: float = 5.0,
        max_restarts: int = 5,
        restart_window_s: float = 300.0,
    ) -> None:
        self.left_out: dict[Mode, str] = dict(plan.left_out)
        self.backends: dict[Mode, Backend] = {
            mode: LlamaServerProcess(spec, start_timeout_s, stop_grace_s)
            for mode, spec in plan.specs.items()
        }
        for mode, urls in plan.remote.items():
            self.backends[mode] = RemoteMode(mode, urls, start_timeout_s=start_timeout_s)
        self.backends = {m: self.backends[m] for m in Mode if m in self.backends}
        self.restarts: dict[Mode, int] = dict.fromkeys(self.backends, 0)
        self._slots = {mode: _slots_of(spec.args) for mode, spec in plan.specs.items()}
        """Each local server's ``-np``, read once: :meth:`local_slots` runs per request."""
        self._max_restarts = max_restarts
        self._window_s = restart_window_s
        self._supervisors: set[asyncio.Task[None]] = set()
        """Running supervisors; a finished one removes itself (swaps start many)."""
        self._stopping = False
        for mode, reason in self.left_out.items():
            # No draft model in the profile is the usual case, not worth a yellow line
            # on every start; a model that should be there and is not is.
            level = log.warning if mode in plan.missing else log.info
            level("backend.left_out", mode=str(mode), reason=reason)

    @classmethod
    def from_settings(
        cls, settings: Settings, profile: Profile, binary: Path, log_dir: Path
    ) -> BackendPool:
        """Plan the pool from settings and build it (nothing is started yet)."""
        return cls.from_plan(settings, plan_pool(settings, profile, binary, log_dir))

    @classmethod
    def from_plan(cls, settings: Settings, plan: PoolPlan) -> BackendPool:
        """Build a pool for ``plan`` with the timeouts and restart limits of ``settings``."""
        b = settings.backend
        return cls(
            plan,
            start_timeout_s=b.start_timeout_s,
            stop_grace_s=b.stop_grace_s,
            max_restarts=b.max_restarts,
            restart_window_s=b.restart_window_s,
        )

    async def start(self) -> None:
        """Start every backend concurrently and supervise the ones that came up.

        Never raises for a failed backend: check :meth:`ready_modes`.
        """

        async def start_one(mode: Mode) -> None:
            with contextlib.suppress(BackendStartError):
                await self.start_mode(mode)

        await asyncio.gather(*(start_one(m) for m in self.backends))

    async def start_mode(self, mode: Mode) -> None:
        """Start ``mode``'s backend and supervise it (swap residency starts them one by one).

        A backend that fails to start is retried once on a fresh port (the port
        race of :func:`~fronde.backends.process.free_port`), then marked failed.

        Raises:
            BackendStartError: both attempts failed (the last one's reason).
        """
        proc = self.backends[mode]
        for attempt in (1, 2):
            try:
                await proc.start()
            except BackendStartError as exc:
                log.error(
                    "backend.start_failed", mode=str(proc.mode), attempt=attempt, error=exc.message
                )
                if attempt == 2:
                    raise
                continue
            task = asyncio.create_task(self._supervise(mode, proc))
            self._supervisors.add(task)
            task.add_done_callback(self._supervisors.discard)
            return

    async def stop_mode(self, mode: Mode) -> None:
        """Stop ``mode``'s backend on purpose (its supervisor sees STOPPING and ends)."""
        await self.backends[mode].stop()

    def is_ready(self, mode: Mode) -> bool:
        """True when ``mode`` has a backend and it is READY."""
        proc = self.backends.get(mode)
        return proc is not None and proc.state is BackendState.READY

    def count_load_with(self, load: Callable[[str], int]) -> None:
        """Balance remote replicas by ``load(url)``: requests in flight (the client counts)."""
        for backend in self.backends.values():
            if isinstance(backend, RemoteMode):
                backend.load = load

    def local_slots(self, url: str) -> int:
        """The ``-np`` of the llama-server this pool started at base ``url``; 0 if none.

        A remote replica's (and an unknown URL's) slots are not this pool's: 0.
        """
        for mode, slots in self._slots.items():
            backend = self.backends[mode]
            if isinstance(backend, LlamaServerProcess) and backend.port and backend.url == url:
                return slots
        return 0

    async def _supervise(self, mode: Mode, proc: Backend) -> None:
        if isinstance(proc, RemoteMode):
            return  # its health loop is its supervisor; the llama-servers are not ours
        recent: deque[float] = deque()
        consecutive = 0
        while True:
            status = await proc.wait()
            if self._stopping or proc.state in (BackendState.STOPPING, BackendState.STOPPED):
                return
            now = time.monotonic()
            while recent and now - recent[0] > self._window_s:
                recent.popleft()
            reason = f"exited with status {status}: {log_tail(proc.spec.log_path, 4)}"
            proc.state = BackendState.FAILED
            proc.last_error = reason
            log.error("backend.crashed", mode=str(proc.mode), pid=proc.pid, reason=reason)
            if len(recent) >= self._max_restarts:
                log.error(
                    "backend.given_up",
                    mode=str(proc.mode),
                    restarts=len(recent),
                    window_s=self._window_s,
                )
                return
            await asyncio.sleep(RESTART_BACKOFF_S[min(consecutive, len(RESTART_BACKOFF_S) - 1)])
            if self._stopping:
                return
            recent.append(now)
            self.restarts[mode] += 1
            try:
                await proc.start()
                consecutive = 0
                log.info("backend.restarted", mode=str(proc.mode), restarts=self.restarts[mode])
            except BackendStartError as exc:
                consecutive += 1
                log.error("backend.restart_failed", mode=str(proc.mode), error=exc.message)

    def ready_modes(self) -> list[Mode]:
        """Return the modes whose backend is READY now, in :class:`Mode` order."""
        return [
            m for m in Mode if m in self.backends and self.backends[m].state is BackendState.READY
        ]

    def get(self, mode: Mode) -> Backend:
        """Return the READY backend for ``mode``.

        Raises:
            ModeUnavailableError: the mode was left out of this pool (message says why).
            BackendUnavailableError: the mode is configured but not ready now
                (loading, restarting, or failed).
        """
        if mode not in self.backends:
            reason = self.left_out.get(mode, "not enabled in the settings")
            raise ModeUnavailableError(f"mode {mode} is not available: {reason}", param="model")
        proc = self.backends[mode]
        if proc.state is not BackendState.READY:
            detail = f": {proc.last_error}" if proc.last_error else ""
            raise BackendUnavailableError(f"backend {mode} is {proc.state}{detail}")
        return proc

    def status(self) -> dict[str, Any]:
        """Return a JSON-ready view of every mode: state, url, pid, restarts, error."""
        out: dict[str, Any] = {}
        for mode, proc in self.backends.items():
            out[str(mode)] = {
                "state": str(proc.state),
                "url": proc.url if proc.port is not None else None,
                "pid": proc.pid,
                "restarts": self.restarts[mode],
                "error": proc.last_error,
            }
            if isinstance(proc, RemoteMode):
                out[str(mode)]["replicas"] = proc.replica_status()
        for mode, reason in self.left_out.items():
            out[str(mode)] = {"state": "left-out", "error": reason}
        return out

    def pids(self) -> list[int]:
        """Return the PIDs of children that are still running."""
        return [p.pid for p in self.backends.values() if p.pid is not None and p.returncode is None]

    async def stop(self) -> None:
        """Stop supervising and stop every child (SIGTERM, grace, SIGKILL, reap)."""
        self._stopping = True
        tasks = list(self._supervisors)  # each removes itself from the set as it ends
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await asyncio.gather(*(p.stop() for p in self.backends.values()))
        log.info("pool.stopped", pid=os.getpid())
