"""The client's connection written at once, for a stream pushed from the upstream's reads.

ASGI hands a response's bytes to ``send``, a coroutine that Starlette and Fronde's
middleware wrap in closures: each piece costs a chain of awaits, and a task to run them
(``docs/overhead.md``). A pushed stream (:mod:`fronde.request.push`) writes from a read
callback, where nothing can be awaited, so it writes to the transport under uvicorn's
``send`` the way that ``send`` would: one HTTP/1.1 chunk a piece, after the head went the
ordinary way; the end of the body goes the ordinary way too. That is uvicorn's
``httptools`` protocol (``uvicorn.protocols.http.httptools_impl``, the one ``fronde
serve`` runs where httptools is installed): :func:`direct_sink` checks for it and its
chunked framing, and gives None anywhere else (h11, another server, a test's ASGI
transport), where the stream is sent through ``send`` as before.

The ``send`` uvicorn gave is kept in the scope by :func:`keep_server_send`, before the
middleware wraps it.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope, Send

__all__ = ["SERVER_SEND", "UvicornSink", "direct_sink", "keep_server_send"]

SERVER_SEND = "fronde.server_send"
"""The scope key under which the server's own ``send`` is kept."""

_CYCLE = ("uvicorn.protocols.http.httptools_impl", "RequestResponseCycle")
"""The one ``send`` owner whose transport and framing :class:`UvicornSink` knows."""


def keep_server_send(scope: Scope, send: Send) -> None:
    """Keep the server's ``send`` in ``scope``, for :func:`direct_sink` (outermost layer)."""
    scope[SERVER_SEND] = send


class UvicornSink:
    """Writes body pieces straight to the transport of a uvicorn httptools response.

    Args:
        cycle: uvicorn's ``RequestResponseCycle``, its head sent with chunked framing.
    """

    def __init__(self, cycle: Any) -> None:
        self._cycle = cycle
        self._write = cycle.transport.write
        self._flow = cycle.flow

    def write(self, data: bytes) -> None:
        """One HTTP/1.1 chunk holding ``data`` (as uvicorn frames it); none once the client left."""
        if data and not self._cycle.disconnected:
            self._write(b"%x\r\n%b\r\n" % (len(data), data))

    @property
    def paused(self) -> bool:
        """Whether the transport's buffer is over its high-water mark."""
        return bool(self._flow.write_paused) and not self._cycle.disconnected

    async def drain(self) -> None:
        """Return once the transport's buffer has drained (or the client has gone)."""
        if self.paused:
            await self._flow.drain()


def direct_sink(scope: Scope) -> UvicornSink | None:
    """A :class:`UvicornSink` for this request's response, or None where there is none.

    Call it once the head has been sent: uvicorn decides the framing then.
    """
    send = scope.get(SERVER_SEND)
    cycle: object = getattr(send, "__self__", None)
    kind = type(cycle)
    if (kind.__module__, kind.__name__) != _CYCLE:
        return None
    started = getattr(cycle, "response_started", False)
    if not started or getattr(cycle, "chunked_encoding", None) is not True:
        return None
    if getattr(cycle, "response_complete", True) or getattr(cycle, "disconnected", True):
        return None
    return UvicornSink(cycle)
