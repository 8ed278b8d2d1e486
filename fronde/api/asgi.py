"""ASGI pieces: a stream that stops when its client leaves, and a watch on other work.

A client that leaves frees its slot: cancelling the work closes its upstream
connection, and llama-server b11434 stops a streamed task whose connection closed
(``req.should_stop`` in ``tools/server/server-context.cpp``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from types import TracebackType
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from fronde.api.direct import direct_sink
from fronde.logging import get_logger
from fronde.request import Answer, Whole
from fronde.request.push import PushRelay
from fronde.stamps import stamp, stamp_done

__all__ = [
    "CLIENT_GONE_STATUS",
    "KEEPALIVE",
    "SSE_HEADERS",
    "ClientWatch",
    "RelayResponse",
    "answered",
    "render",
    "until_disconnect",
]

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
"""Headers of every event stream: no caching, no buffering by nginx."""

log = get_logger(__name__)


CLIENT_GONE_STATUS = 499
"""The status logged for a request whose client left before its answer (nginx's code)."""


class ClientWatch:
    """Whether the client has left, read by one task for the request's whole life.

    The task reads ``receive`` (the body already read) until ``http.disconnect``, then
    cancels the scope it holds open as a context manager, if any: the work before the answer
    (:func:`until_disconnect`), then the stream (:class:`RelayResponse`). One task a
    request, where a watcher and a work task before the answer and an anyio task group
    (a stream task, a keep-alive task) after it cost Fronde's CPU on every request
    (docs/overhead.md). The cancel is an anyio scope's, so shielded clean-ups (the
    upstream's close) still run to their end.

    Args:
        receive: the request's ASGI ``receive``.
    """

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self._scope: anyio.CancelScope | None = None
        self._task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        # A receive that fails counts as the client leaving, as it did when the watcher's
        # result was gathered with the work's.
        with contextlib.suppress(Exception):
            while (await receive())["type"] != "http.disconnect":
                pass
        self.gone = True
        if self._scope is not None:
            self._scope.cancel()

    def __enter__(self) -> anyio.CancelScope:
        """Enter a scope cancelled when the client leaves (at once if it has left already).

        Not reentrant: the work, then the stream, each in its turn.
        """
        scope = anyio.CancelScope().__enter__()
        if self.gone:
            scope.cancel()
        self._scope = scope
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        scope, self._scope = self._scope, None
        return scope is not None and scope.__exit__(exc_type, exc, tb)

    def stop(self) -> None:
        """Stop watching (the answer has ended, or nobody streams it)."""
        self._task.cancel()


async def until_disconnect(
    receive: Receive, work: Awaitable[Response], watch: ClientWatch | None = None
) -> Response:
    """Await ``work`` unless the client leaves first; then cancel it and answer nothing.

    Only streams used to watch ``http.disconnect``: a non-streamed request, a probe
    or a request queued for a decode slot kept running for a client that had gone,
    holding the only slot (a 2048-token answer held it 404 s). Cancelling ``work``
    closes its upstream connection, and llama-server stops a task whose connection
    closed (``req.should_stop`` in ``tools/server/server-context.cpp``). A streamed
    answer's own :class:`RelayResponse` takes over the watch once ``work`` returns it.

    Args:
        receive: the request's ASGI ``receive`` (its body already read).
        work: what answers the request, run in the calling task.
        watch: the request's watch, left running for the caller to stop or hand on;
            None: one of its own, stopped on return.

    Returns:
        ``work``'s response, or an empty :data:`CLIENT_GONE_STATUS` one nobody reads.

    Raises:
        Whatever ``work`` raises, when it finishes first.
    """
    own = ClientWatch(receive) if watch is None else watch
    try:
        with own:
            return await work
    finally:
        if watch is None:
            own.stop()
    log.info("request.client_gone")  # the scope caught the client's leaving
    return Response(status_code=CLIENT_GONE_STATUS)


KEEPALIVE = b": keep-alive\n\n"
"""An SSE comment: clients ignore it, idle-timeout proxies see bytes flowing."""


class RelayResponse(StreamingResponse):
    """A :class:`StreamingResponse` that stops the moment the client leaves.

    Starlette (ASGI spec ≥ 2.4) notices a gone client only when a ``send`` fails,
    and then leaves the body iterator suspended until garbage collection, so the
    upstream llama-server would keep generating for nobody. Here a
    :class:`ClientWatch` waits for ``http.disconnect`` the whole time, cancels the
    stream at once (the iterator's ``finally`` closes the upstream response, which
    frees the slot), and the iterator is always closed on the way out.

    With ``keepalive_s``, a timer sends :data:`KEEPALIVE` after each ``keepalive_s``
    without a byte (a long prefill or probe on a CPU; proxies with an idle timeout,
    nginx's 60 s, cut a silent stream). It wakes once an interval, not once an
    event: a relayed event costs a time stamp and an uncontended lock, and a task
    is made only for a comment that goes out. A pushed stream (``push``, written from the
    upstream's reads, :mod:`fronde.request.push`) is timed by its count of pieces, read once
    an interval: its comment comes after one to two intervals of silence.

    Args:
        content: the body's pieces, bytes.
        keepalive_s: the silence after which a comment goes out, s; None: never.
        watch: the request's watch (:func:`answered`), which this response stops when
            it ends; None: one of its own.
        push: the answer as a pushed stream, used instead of ``content`` where the server
            lets it be written at once (:func:`~fronde.api.direct.direct_sink`).
        **kwargs: as :class:`StreamingResponse`'s.
    """

    def __init__(
        self,
        content: Any,
        keepalive_s: float | None = None,
        watch: ClientWatch | None = None,
        push: PushRelay | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(content, **kwargs)
        self.keepalive_s = keepalive_s
        self.watch = watch
        self.push = push
        self._scope: Scope = {}
        self._pushed = 0  # the pushed pieces the keep-alive last saw
        self._sending = asyncio.Lock()
        self._last = 0.0
        self._started = False
        self._timer: asyncio.TimerHandle | None = None
        self._beat: asyncio.Task[None] | None = None
        self._drained = False  # the body iterator ran to its end

    async def stream_response(self, send: Send) -> None:
        """Send the head, then each piece as it comes (under the lock the keep-alive takes)."""
        async with self._sending:
            head = {"status": self.status_code, "headers": self.raw_headers}
            await send({"type": "http.response.start", **head})
            self._started = True
        stamp("head")
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        sink = None if self.push is None else direct_sink(self._scope)
        if self.push is not None and sink is not None:
            await self.push.run(sink)  # each piece written from the upstream's reads
        else:
            await self._iterate(send, loop)
        self._drained = True
        async with self._sending:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _iterate(self, send: Send, loop: asyncio.AbstractEventLoop) -> None:
        """Send each piece of the body iterator as it comes."""
        async for chunk in self.body_iterator:
            body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
            async with self._sending:
                await send({"type": "http.response.body", "body": body, "more_body": True})
            self._last = loop.time()
            stamp_done("byte")

    def _wait(self, send: Send, interval_s: float) -> None:
        """Check again once ``interval_s`` may have passed since the last byte."""
        loop = asyncio.get_running_loop()
        idle = loop.time() - self._last if self._started else 0.0
        delay_s = max(interval_s - idle, interval_s / 10)
        self._timer = loop.call_later(delay_s, self._due, send, interval_s)

    def _due(self, send: Send, interval_s: float) -> None:
        loop = asyncio.get_running_loop()
        if self.push is not None and self.push.sent != self._pushed:
            self._pushed = self.push.sent  # pieces went out since the last look
            self._last = loop.time()
        if not self._started or loop.time() - self._last < interval_s:
            self._wait(send, interval_s)
        else:
            self._beat = asyncio.ensure_future(self._keepalive(send, interval_s))

    async def _keepalive(self, send: Send, interval_s: float) -> None:
        """Send :data:`KEEPALIVE`, then wait for the next silence."""
        with contextlib.suppress(OSError):  # the client is gone: the watch sees it
            async with self._sending:
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
            self._last = asyncio.get_running_loop().time()
            self._wait(send, interval_s)

    def _disarm(self) -> None:
        """No keep-alive any more: the stream has ended (nothing awaited since its end)."""
        if self._timer is not None:
            self._timer.cancel()
        if self._beat is not None:
            self._beat.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream the body until it ends or the client disconnects, whichever is first."""
        self._scope = scope
        watch = ClientWatch(receive) if self.watch is None else self.watch
        try:
            with watch:
                if self.keepalive_s is not None:
                    self._wait(send, self.keepalive_s)
                with contextlib.suppress(OSError):  # the client is gone
                    await self.stream_response(send)
        finally:
            self._disarm()
            watch.stop()
            aclose = None if self._drained else getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        if self.background is not None:
            await self.background()


def render(answer: Answer, watch: ClientWatch | None = None) -> Response:
    """The HTTP response of a dispatcher's answer.

    JSON, or an event stream that stops when its client leaves (and then runs the
    answer's clean-up); ``watch``: the request's :class:`ClientWatch`, which a stream
    takes over.
    """
    if isinstance(answer, Whole):
        stamp_done("answer")
        return JSONResponse(answer.body, headers=answer.headers)
    return RelayResponse(
        answer.events,
        answer.keepalive_s,
        watch,
        answer.push,
        media_type="text/event-stream",
        headers=answer.headers | SSE_HEADERS,
        background=BackgroundTask(answer.close),
    )


async def answered(receive: Receive, work: Awaitable[Answer]) -> Response:
    """:func:`render` ``work``'s answer, or cancel ``work`` if the client leaves first."""
    watch = ClientWatch(receive)

    async def rendered() -> Response:
        return render(await work, watch)

    try:
        response = await until_disconnect(receive, rendered(), watch)
    except BaseException:
        watch.stop()
        raise
    if not isinstance(response, RelayResponse):
        watch.stop()  # a stream stops it when it ends
    return response
