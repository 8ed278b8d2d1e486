"""A mode served by llama-servers that run elsewhere (other hosts, other units).

``remote = {"ngram-mod" = ["http://gpu1:8081", "http://gpu2:8081"]}`` makes the
pool start no local process for that mode: its replicas are polled on
``/health`` and requests go to the ready replica with the fewest requests in
flight. Health uses hysteresis so one slow answer does not flap a replica:

    unknown ──2 successes──▶ up ──3 failures──▶ down ──2 successes──▶ up

A request a replica drops before its answer began counts as one failed check there
(:meth:`RemoteMode.failed`), and goes once to another up replica
(:mod:`fronde.backends.affinity`, which also keeps a probe's continuation on the
replica of the probe).

With a :attr:`RemoteMode.check` (hosts that serve every mode, ``remote.all``:
:mod:`fronde.backends.hosts`), a replica is checked before each time it would come up;
one the check refuses stays out, with the reason as its error, until it goes down (a
restart may bring another binary) and comes back.

A replica's ``/props`` entry in the pool's :class:`~fronde.backends.props.PropsCache` is
dropped at each failed health check or dropped request, not only when the replica goes
down: a restart by its owner (perhaps with other flags) fails at least one check, and
may take less than the :data:`DOWN_AFTER` failures that take the replica down.

:class:`RemoteMode` offers the subset of
:class:`~fronde.backends.process.LlamaServerProcess` the pool and the routes use
(``url``, ``state``, ``start``, ``stop``, ``wait``), so the rest of Fronde does
not know the difference.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TypedDict

import httpx

from fronde.backends.process import BackendState
from fronde.backends.props import PropsCache
from fronde.errors import BackendStartError, BackendUnavailableError
from fronde.logging import get_logger
from fronde.modes import Mode

__all__ = ["DOWN_AFTER", "HEALTH_EVERY_S", "UP_AFTER", "RemoteMode", "Replica", "ReplicaView"]

log = get_logger(__name__)

DOWN_AFTER = 3
"""Consecutive failed health checks that mark a replica down."""
UP_AFTER = 2
"""Consecutive successful health checks that bring a replica (back) up."""
HEALTH_EVERY_S = 1.0
"""Seconds between two health checks of one replica."""
HEALTH_TIMEOUT_S = 2.0
"""A health check that takes longer fails, seconds."""


class ReplicaView(TypedDict):
    """One replica in ``/health``.

    Its ``url``, whether it is ``up``, the requests ``in_flight`` to it, and the
    ``error`` that last took it down (or None).
    """

    url: str
    up: bool
    in_flight: int
    error: str | None


@dataclass
class Replica:
    """One remote llama-server and its health counters."""

    url: str
    up: bool = False
    fails: int = 0
    oks: int = 0
    last_error: str | None = None
    refused: bool = False
    """The check refused it (``last_error`` says why): it stays out until it goes down."""

    @property
    def due(self) -> bool:
        """One more successful health check would bring it up (so check it first)."""
        return not self.up and not self.refused and self.oks + 1 >= UP_AFTER

    @property
    def settled(self) -> bool:
        """Up, refused, or down for :data:`DOWN_AFTER` checks in a row (unreachable)."""
        return self.up or self.refused or self.fails >= DOWN_AFTER

    def refuse(self, why: str) -> None:
        """Keep it out for ``why`` (a check it failed) until it goes down and comes back."""
        self.refused, self.last_error = True, why

    def observe(self, ok: bool, error: str | None = None) -> bool:
        """Fold one health check in; return True when ``up`` changed."""
        if ok:
            self.oks, self.fails = self.oks + 1, 0
            if not self.up and not self.refused and self.oks >= UP_AFTER:
                self.up, self.last_error = True, None
                return True
        else:
            self.fails, self.oks = self.fails + 1, 0
            self.last_error, self.refused = error, False
            if self.up and self.fails >= DOWN_AFTER:
                self.up = False
                return True
        return False


@dataclass
class RemoteMode:
    """The remote replicas of one mode, behind the interface of a local backend.

    Args:
        mode: the mode they serve (``remote.all``: every mode, per request).
        urls: their base URLs.
        load: base URL → requests in flight there (the backend client counts them).
        start_timeout_s: how long :meth:`start` waits for a first replica, seconds.
        check: base URL → why that replica may not serve (None: it may), awaited before
            it comes up; None: health alone decides.
        failure: why the pool gave these replicas up at start (shown as the error).
        props: the pool's ``/props`` cache, whose entry of a replica that fails a check
            is dropped (None: no cache).
    """

    mode: Mode | str
    urls: list[str]
    load: Callable[[str], int] = lambda _url: 0
    start_timeout_s: float = 180.0
    check: Callable[[str], Awaitable[str | None]] | None = None
    failure: str | None = None
    props: PropsCache | None = None
    replicas: list[Replica] = field(default_factory=list[Replica])
    state: BackendState = BackendState.STOPPED
    starts: int = 0
    pid: None = None
    port: None = None
    returncode: None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list[asyncio.Task[None]], repr=False)
    _stopped: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def __post_init__(self) -> None:
        self.replicas = [Replica(u.rstrip("/")) for u in self.urls]

    @property
    def last_error(self) -> str | None:
        """Why no replica is up, or None."""
        if self.failure is not None:
            return self.failure
        if any(r.up for r in self.replicas):
            return None
        errors = [f"{r.url}: {r.last_error}" for r in self.replicas if r.last_error]
        return "; ".join(errors) or None

    @property
    def url(self) -> str:
        """The up replica with the fewest requests in flight (first listed on a tie).

        Raises:
            BackendUnavailableError: no replica is up (the pool checks ``state`` first).
        """
        return self.url_for()

    def url_for(self, avoid: Collection[str] = (), prefer: Iterable[str] = ()) -> str:
        """The base URL one call of a request goes to, among the up replicas.

        The first of ``prefer`` that is up (its KV cache holds the request so far), else
        the one with the fewest requests in flight (first listed on a tie); never one in
        ``avoid`` (base URLs the request failed on).

        Raises:
            BackendUnavailableError: no replica outside ``avoid`` is up.
        """
        up = [r for r in self.replicas if r.up and r.url not in avoid]
        if not up:
            other = " other" if avoid else ""
            raise BackendUnavailableError(f"no{other} replica of {self.mode} is up")
        ups = {r.url for r in up}
        kept = next((url for url in prefer if url in ups), None)
        return kept if kept is not None else min(up, key=lambda r: self.load(r.url)).url

    def failed(self, url: str, error: str) -> None:
        """A request to replica ``url`` failed before its answer began (``error``: why).

        It counts as one failed health check there (the hysteresis: :data:`DOWN_AFTER`
        in a row take the replica down), so a replica that drops requests leaves as
        soon as one that fails its checks. An unknown ``url`` is ignored.
        """
        for replica in self.replicas:
            if replica.url == url:
                self._forget(url)
                if replica.observe(False, error):
                    log.warning(
                        "backend.replica_down",
                        mode=str(self.mode),
                        url=url,
                        error=replica.last_error,
                    )
        self._refresh()

    def _forget(self, url: str) -> None:
        """Drop ``url``'s ``/props`` entry: the server that answers next may be another."""
        if self.props is not None:
            self.props.forget(url)

    def _refresh(self) -> None:
        if self.state is not BackendState.STOPPED:
            up = any(r.up for r in self.replicas)
            self.state = BackendState.READY if up else BackendState.FAILED

    async def _watch(self, replica: Replica) -> None:
        async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_S) as http:
            while True:
                try:
                    resp = await http.get(f"{replica.url}/health")
                    ok, error = resp.status_code == 200, f"/health answered {resp.status_code}"
                except httpx.HTTPError as exc:
                    ok, error = False, f"{type(exc).__name__}: {exc}"
                if not ok:
                    self._forget(replica.url)
                if ok and self.check is not None and replica.due:
                    why = await self.check(replica.url)
                    if why is not None:
                        replica.refuse(why)
                        log.error("backend.replica_refused", url=replica.url, why=why)
                if replica.observe(ok, None if ok else error):
                    event = "backend.replica_up" if replica.up else "backend.replica_down"
                    log.warning(
                        event, mode=str(self.mode), url=replica.url, error=replica.last_error
                    )
                self._refresh()
                await asyncio.sleep(HEALTH_EVERY_S)

    async def start(self) -> None:
        """Start watching the replicas; return once one is up.

        Raises:
            BackendStartError: none came up within ``start_timeout_s``.
        """
        self.starts += 1
        self.failure = None
        self._stopped.clear()
        self.state = BackendState.STARTING
        self._tasks = [asyncio.create_task(self._watch(r)) for r in self.replicas]
        deadline = asyncio.get_running_loop().time() + self.start_timeout_s
        while not any(r.up for r in self.replicas):
            if all(r.refused for r in self.replicas):  # no need to wait: none will serve
                await self.stop()
                self.state = BackendState.FAILED
                raise BackendStartError(f"no replica of {self.mode} can serve: {self.last_error}")
            if asyncio.get_running_loop().time() > deadline:
                await self.stop()
                self.state = BackendState.FAILED
                raise BackendStartError(
                    f"no replica of {self.mode} answered /health: {self.last_error}"
                )
            await asyncio.sleep(0.05)
        self.state = BackendState.READY
        log.info("backend.remote_ready", mode=str(self.mode), urls=self.urls)

    async def wait(self) -> int | None:
        """Block until :meth:`stop` (a remote replica never "exits" here); return None."""
        await self._stopped.wait()
        return None

    async def stop(self) -> None:
        """Stop watching (the remote llama-servers keep running: someone else owns them)."""
        self.state = BackendState.STOPPED
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        self._stopped.set()

    def replica_status(self) -> list[ReplicaView]:
        """JSON-ready replica states for ``/health``."""
        return [
            {"url": r.url, "up": r.up, "in_flight": self.load(r.url), "error": r.last_error}
            for r in self.replicas
        ]
