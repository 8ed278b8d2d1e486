"""The pool: the supervised llama-servers, one per mode or one for every mode.

The pool owns the backends. Each started llama-server has one supervisor task that
waits for the child to exit and, unless the pool is stopping, restarts it with
exponential back-off, up to ``max_restarts`` within ``restart_window_s``; past
that its modes are marked failed and left out. A mode whose model is missing (the
draft mode on a profile without a draft model) is never started; it is listed in
:attr:`BackendPool.left_out` with the reason, for ``/health`` and ``/v1/models``.

The topology (:mod:`fronde.backends.single`) is settled in :meth:`BackendPool.start`:
``single`` starts the one llama-server of every mode and checks that its binary honours
the per-request fields; ``auto`` does the same and, where the binary does not (or the
shared server cannot start), stops it and starts one llama-server per mode instead,
logging why once (``topology.chosen``). One process is one point of failure: when it
crashes every mode is down until its supervisor has restarted it. Remote hosts that
serve every mode (``remote.all``, :mod:`fronde.backends.hosts`) run single too, each host
checked at start; with them there is no fallback (nothing here to start per mode).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fronde.backends.affinity import Backend, remote_of
from fronde.backends.hosts import HOSTS_LABEL, HostCheck, start_hosts
from fronde.backends.pool_plan import PlanTopology, PoolPlan, plan_pool
from fronde.backends.process import BackendState, LlamaServerProcess, log_tail
from fronde.backends.props import PropsCache
from fronde.backends.remote import RemoteMode
from fronde.backends.single import SharedMode, SharedServer, per_request_support, remember_stock
from fronde.config import Settings
from fronde.errors import BackendStartError, BackendUnavailableError, ModeUnavailableError
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.runtime.models import Profile

__all__ = ["Backend", "BackendPool", "PoolPlan", "plan_pool"]

log = get_logger(__name__)

RESTART_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
"""Wait before the n-th consecutive restart of a crashed backend, seconds."""


OwnBackend = LlamaServerProcess | RemoteMode
"""A backend that serves one mode alone (per-mode)."""

NO_FIELDS: Mapping[str, Any] = {}
"""The request fields of a mode with a llama-server of its own: none."""


def _slots_of(args: list[str]) -> int:
    """The ``-np`` an argv gives llama-server (its last one wins, as there); 1 without one."""
    slots = 1
    for flag, value in itertools.pairwise(args):
        if flag in ("-np", "--parallel") and value.isdigit():
            slots = int(value)
    return slots


class BackendPool:
    """Starts, supervises and stops the llama-servers of the planned modes.

    Args:
        plan: from :func:`plan_pool`.
        start_timeout_s: per-start health deadline, seconds.
        stop_grace_s: SIGTERM to SIGKILL grace, seconds.
        max_restarts: restarts allowed per llama-server within ``restart_window_s``.
        restart_window_s: the window, seconds.

    Attributes:
        backends: each mode's backend, in :class:`Mode` order: its own process (or
            remote replicas) per mode, or its :class:`SharedMode` view in single.
        topology: ``single`` or ``per-mode`` once :meth:`start` settled it; ``auto``
            before (the plan's).
        topology_why: how it was settled, for ``/health`` and the log.
        props: each backend's ``GET /props``, read once per base URL
            (:mod:`fronde.backends.props`); the start checks refresh it, and a remote
            replica's entry is dropped when it fails a health check.
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
        self.props = PropsCache()
        per_mode: dict[Mode, OwnBackend] = {
            mode: LlamaServerProcess(spec, start_timeout_s, stop_grace_s)
            for mode, spec in plan.specs.items()
        }
        for mode, urls in plan.remote.items():
            per_mode[mode] = RemoteMode(
                mode, urls, start_timeout_s=start_timeout_s, props=self.props
            )
        self.per_mode: dict[Mode, OwnBackend] = {m: per_mode[m] for m in Mode if m in per_mode}
        """Each mode's own backend (what per-mode runs)."""
        self.shared: SharedServer | None = None
        """The llama-server of every mode (what single runs), if the plan has one."""
        self.topology: PlanTopology = plan.topology
        self.topology_why = plan.why
        self._stock_file = plan.stock_file
        self.backends: dict[Mode, Backend] = dict[Mode, Backend](self.per_mode)
        self._hosts: tuple[RemoteMode, HostCheck] | None = None
        """The remote hosts that serve every mode and their check, if the plan has them."""
        if plan.hosts:
            hosts = RemoteMode(
                HOSTS_LABEL, list(plan.hosts), start_timeout_s=start_timeout_s, props=self.props
            )
            check = HostCheck(list(plan.fields), self.props)
            self.shared, self._hosts = SharedServer(hosts), (hosts, check)
            self.backends = {m: SharedMode(m, self.shared, f) for m, f in plan.fields.items()}
        elif plan.single is not None and plan.topology != "per-mode":
            shared = SharedServer(LlamaServerProcess(plan.single, start_timeout_s, stop_grace_s))
            self.shared = shared
            self.backends = {
                m: SharedMode(m, shared, plan.fields.get(m, {})) for m in self.per_mode
            }
        self.restarts: dict[Mode, int] = dict.fromkeys(self.backends, 0)
        self._slots = {id(p): _slots_of(p.spec.args) for p in self._processes()}
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

    def _processes(self) -> list[LlamaServerProcess]:
        """Every local llama-server the pool may run, each once."""
        shared = [self.shared.process] if self.shared is not None else []
        own = [*self.per_mode.values(), *shared]
        return [p for p in own if isinstance(p, LlamaServerProcess)]

    async def start(self) -> None:
        """Settle the topology, start its llama-servers and supervise the ones that came up.

        Never raises for a failed backend: check :meth:`ready_modes`.
        """
        if self._hosts is not None and self.shared is not None:
            await start_hosts(self.shared, *self._hosts, self.topology_why)
            for mode, reason in self._hosts[1].left_out.items():  # no host drafts for them
                self.backends.pop(mode, None)
                self.left_out[mode] = reason
            return
        if self.shared is not None and self.topology != "per-mode":
            if await self._start_single(self.shared):
                return
        else:
            log.info("topology.chosen", topology="per-mode", why=self.topology_why)

        async def start_one(mode: Mode) -> None:
            with contextlib.suppress(BackendStartError):
                await self.start_mode(mode)

        await asyncio.gather(*(start_one(m) for m in self.backends))

    async def _start_single(self, shared: SharedServer) -> bool:
        """Start the shared llama-server and check its binary; False: run per-mode instead.

        ``single`` keeps it whatever happens (a server that fails, or a binary that does
        not honour the fields, leaves every mode failed with the reason); ``auto`` stops
        it and falls back to one llama-server per mode.
        """
        modes, proc = tuple(self.backends), shared.process
        if not isinstance(proc, LlamaServerProcess):
            return False  # remote hosts: start() settles them
        try:
            await self._started(proc)
        except BackendStartError as exc:
            why = f"the llama-server of every mode did not start: {exc.message}"
        else:
            why = await per_request_support(proc.url, props=self.props)
            if why is None:
                shared.checked = True  # its modes read ready from now on
                asked, self.topology = self.topology, "single"
                self.topology_why = f"backend.topology = {asked}: {proc.spec.binary} honours "
                self.topology_why += "per-request speculation"
                log.info("topology.chosen", topology="single", why=self.topology_why)
                self._supervise_in_background(modes, proc)
                return True
            why = f"{proc.spec.binary} does not honour per-request speculation: {why}"
            if self._stock_file is not None:  # the next start goes per-mode at once
                remember_stock(self._stock_file, proc.spec.binary, why)
            await proc.stop()
        if self.topology == "single":
            proc.state, proc.last_error = BackendState.FAILED, f"backend.topology = single: {why}"
            log.error("topology.failed", topology="single", why=why)
            return True
        self.topology, self.topology_why = "per-mode", why
        self.backends = dict[Mode, Backend](self.per_mode)
        self.shared = None  # stopped: its port may be another server's now (local_slots)
        log.info("topology.chosen", topology="per-mode", why=why)
        return False

    async def start_mode(self, mode: Mode) -> None:
        """Start ``mode``'s own backend and supervise it (swap residency starts them one by one).

        Raises:
            BackendStartError: both attempts failed (the last one's reason).
        """
        proc = self.per_mode[mode]
        await self._started(proc)
        self._supervise_in_background((mode,), proc)

    async def _started(self, proc: OwnBackend) -> None:
        """Start ``proc``, retried once on a fresh port if it fails, then marked failed.

        The retry is for the port race of :func:`~fronde.backends.process.free_port`.

        Raises:
            BackendStartError: both attempts failed (the last one's reason).
        """
        for attempt in (1, 2):
            try:
                await proc.start()
                return
            except BackendStartError as exc:
                log.error(
                    "backend.start_failed", mode=str(proc.mode), attempt=attempt, error=exc.message
                )
                if attempt == 2:
                    raise

    def _supervise_in_background(self, modes: tuple[Mode, ...], proc: OwnBackend) -> None:
        task = asyncio.create_task(self._supervise(modes, proc))
        self._supervisors.add(task)
        task.add_done_callback(self._supervisors.discard)

    async def stop_mode(self, mode: Mode) -> None:
        """Stop ``mode``'s backend on purpose (its supervisor sees STOPPING and ends)."""
        await self.backends[mode].stop()

    def is_ready(self, mode: Mode) -> bool:
        """True when ``mode`` has a backend and it is READY."""
        proc = self.backends.get(mode)
        return proc is not None and proc.state is BackendState.READY

    def fields(self, mode: Mode) -> Mapping[str, Any]:
        """The body fields that make a request run as ``mode`` on its backend.

        Empty for a mode with a llama-server of its own; in single, the mode's
        :func:`~fronde.backends.single.mode_fields`.
        """
        backend = self.backends.get(mode)
        return backend.fields if isinstance(backend, SharedMode) else NO_FIELDS

    def count_load_with(self, load: Callable[[str], int]) -> None:
        """Balance remote replicas by ``load(url)``: requests in flight (the client counts)."""
        for backend in self.backends.values():
            remote = remote_of(backend)
            if remote is not None:
                remote.load = load

    def local_slots(self, url: str) -> int:
        """The ``-np`` of the llama-server this pool started at base ``url``; 0 if none.

        A remote replica's (and an unknown URL's) slots are not this pool's: 0.
        """
        for proc in self._processes():
            if proc.port and proc.url == url:
                return self._slots[id(proc)]
        return 0

    async def _supervise(self, modes: tuple[Mode, ...], proc: OwnBackend) -> None:
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
            for mode in modes:
                self.restarts[mode] += 1
            try:
                await proc.start()
                consecutive = 0
                restarts = self.restarts[modes[0]]
                log.info("backend.restarted", mode=str(proc.mode), restarts=restarts)
            except BackendStartError as exc:
                consecutive += 1
                log.error("backend.restart_failed", mode=str(proc.mode), error=exc.message)

    def ready_modes(self) -> list[Mode]:
        """Return the modes whose backend is READY now, in :class:`Mode` order."""
        return [m for m, b in self.backends.items() if b.state is BackendState.READY]

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
        """Return a JSON-ready view of every mode: state, url, pid, restarts, error.

        In single every mode shows the one llama-server (the same url and pid).
        """
        out: dict[str, Any] = {}
        for mode, proc in self.backends.items():
            out[str(mode)] = {
                "state": str(proc.state),
                "url": proc.url if proc.port is not None else None,
                "pid": proc.pid,
                "restarts": self.restarts[mode],
                "error": proc.last_error,
            }
            remote = remote_of(proc)
            if remote is not None:
                out[str(mode)]["replicas"] = remote.replica_status()
        for mode, reason in self.left_out.items():
            out[str(mode)] = {"state": "left-out", "error": reason}
        return out

    def pids(self) -> list[int]:
        """Return the PIDs of children that are still running."""
        return [p.pid for p in self._processes() if p.pid is not None and p.returncode is None]

    async def stop(self) -> None:
        """Stop supervising and stop every child (SIGTERM, grace, SIGKILL, reap)."""
        self._stopping = True
        tasks = list(self._supervisors)  # each removes itself from the set as it ends
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        shared = [self.shared.process] if self.shared is not None else []
        await asyncio.gather(*(p.stop() for p in [*self.per_mode.values(), *shared]))
        log.info("pool.stopped", pid=os.getpid())
