"""Time stamps of a request's way to its first byte: a debug setting (``server.stamps``).

Off by default. On, each HTTP request gets a :class:`Stamps` (in a context variable, so
the tasks a request starts share it) and the floors it crosses mark what they do:
``parsed`` (body read and checked), ``planned`` (route chosen), ``slot`` (decode gate
passed), ``call <path>`` and ``called <path>`` around an upstream call that is not the
generation (``/slots``, ``/props``, ``/tokenize`` …), ``sent`` (the generation's
request handed to the HTTP client), ``headers`` (its response headers came),
``event`` (its first body read), ``head`` (the client's response head written) and
``byte`` (the client's first body byte written). The line ``request.stamps`` is logged
once, at the first body byte (a stream) or the response (a whole answer): ``t0`` is
the request's arrival on :func:`time.monotonic` (seconds; the same clock for every
process of a Linux machine, so a client can place its own times beside it), ``ms`` each
mark in milliseconds since it, and ``cpu_ms`` the proxy process's CPU time
(:func:`time.process_time`, every task's and thread's) spent since it at each mark: what
Fronde took from the cores while, say, the backend prefilled. A mark made twice keeps
its first time.

``scripts/ttft_split.py`` reads these lines.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

from fronde.logging import get_logger

__all__ = ["Stamps", "begin", "current_stamps", "stamp", "stamp_done"]

log = get_logger(__name__)

_current: ContextVar[Stamps | None] = ContextVar("fronde_stamps", default=None)


class Stamps:
    """The marks of one request: name → (:func:`time.monotonic`, :func:`time.process_time`), s."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.t0 = time.monotonic()
        self.cpu0 = time.process_time()
        self.marks: dict[str, tuple[float, float]] = {}
        self.logged = False

    def mark(self, name: str) -> None:
        """Mark ``name`` now, unless it was marked before."""
        if name not in self.marks:
            self.marks[name] = (time.monotonic(), time.process_time())

    def log(self) -> None:
        """Log ``request.stamps`` once (later calls are no-ops)."""
        if self.logged:
            return
        self.logged = True
        ms = {k: round((t - self.t0) * 1000, 3) for k, (t, _) in self.marks.items()}
        cpu = {k: round((c - self.cpu0) * 1000, 3) for k, (_, c) in self.marks.items()}
        log.info("request.stamps", path=self.path, t0=self.t0, ms=ms, cpu_ms=cpu)


def current_stamps() -> Stamps | None:
    """This context's request's stamps (None when off): for a callback run outside it."""
    return _current.get()


def begin(path: str) -> Stamps:
    """Start the stamps of a request to ``path`` in this context (the ASGI middleware)."""
    stamps = Stamps(path)
    _current.set(stamps)
    return stamps


def stamp(name: str) -> None:
    """Mark ``name`` on this context's request, if stamps are on (else a no-op)."""
    stamps = _current.get()
    if stamps is not None:
        stamps.mark(name)


def stamp_done(name: str) -> None:
    """Mark ``name`` and log this context's stamps (no-op when off or logged already)."""
    stamps = _current.get()
    if stamps is not None:
        stamps.mark(name)
        stamps.log()
