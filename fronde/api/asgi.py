"""ASGI pieces: a stream that stops when its client leaves, and a watch on other work.

A client that leaves frees its slot: cancelling the work closes its upstream
connection, and llama-server b11434 stops a streamed task whose connection closed
(``req.should_stop`` in ``tools/server/server-context.cpp``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

import anyio
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from fronde.logging import get_logger
from fronde.request import Answer, Whole
from fronde.stamps import stamp, stamp_done

__all__ = [
    "CLIENT_GONE_STATUS",
    "KEEPALIVE",
    "SSE_HEADERS",
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


async def _disconnected(receive: Receive) -> None:
    """Return once the client has disconnected (the body was already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(receive: Receive, work: Awaitable[Response]) -> Response:
    """Await ``work`` unless the client leaves first; then cancel it and answer nothing.

    Only streams used to watch ``http.disconnect``: a non-streamed request, a probe
    or a request queued for a decode slot kept running for a client that had gone,
    holding the only slot (a 2048-token answer held it 404 s). Cancelling ``work``
    closes its upstream connection, and llama-server stops a task whose connection
    closed (``req.should_stop`` in ``tools/server/server-context.cpp``). A streamed
    answer's own :class:`RelayResponse` takes over the watch once ``work`` returns it.

    Args:
        receive: the request's ASGI ``receive`` (its body already read).
        work: what answers the request.

    Returns:
        ``work``'s response, or an empty :data:`CLIENT_GONE_STATUS` one nobody reads.

    Raises:
        Whatever ``work`` raises, when it finishes first.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        watcher.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled():
        log.info("request.client_gone")
        return Response(status_code=CLIENT_GONE_STATUS)
    return task.result()


KEEPALIVE = b": keep-alive\n\n"
"""An SSE comment: clients ignore it, idle-timeout proxies see bytes flowing."""


class RelayResponse(StreamingResponse):
    """A :class:`StreamingResponse` that stops the moment the client leaves.

    Starlette (ASGI spec ≥ 2.4) notices a gone client only when a ``send`` fails,
    and then leaves the body iterator suspended until garbage collection, so the
    upstream llama-server would keep generating for nobody. Here a task waits for
    ``http.disconnect`` the whole time, cancels the stream at once (the iterator's
    ``finally`` closes the upstream response, which frees the slot), and the
    iterator is always closed on the way out.

    With ``keepalive_s``, a third task sends :data:`KEEPALIVE` after each
    ``keepalive_s`` without a byte (a long prefill or probe on a CPU; proxies with an
    idle timeout, nginx's 60 s, cut a silent stream). It wakes once an interval, not
    once an event: a relayed event costs a time stamp and an uncontended lock, not a
    task and a timer of its own.

    Args:
        content: the body's pieces, bytes.
        keepalive_s: the silence after which a comment goes out, s; None: never.
        **kwargs: as :class:`StreamingResponse`'s.
    """

    def __init__(self, content: Any, keepalive_s: float | None = None, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.keepalive_s = keepalive_s
        self._sending = asyncio.Lock()
        self._last = 0.0
        self._started = False

    async def stream_response(self, send: Send) -> None:
        """Send the head, then each piece as it comes (under the lock the keep-alive takes)."""
        async with self._sending:
            head = {"status": self.status_code, "headers": self.raw_headers}
            await send({"type": "http.response.start", **head})
            self._started = True
        stamp("head")
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        async for chunk in self.body_iterator:
            body = chunk if isinstance(chunk, bytes | memoryview) else chunk.encode(self.charset)
            async with self._sending:
                await send({"type": "http.response.body", "body": body, "more_body": True})
            self._last = loop.time()
            stamp_done("byte")
        async with self._sending:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _keepalive(self, send: Send, interval_s: float) -> None:
        """Send :data:`KEEPALIVE` whenever ``interval_s`` passed since the last byte."""
        loop = asyncio.get_running_loop()
        while True:
            idle = loop.time() - self._last if self._started else 0.0
            await asyncio.sleep(max(interval_s - idle, interval_s / 10))
            if not self._started or loop.time() - self._last < interval_s:
                continue
            async with self._sending:
                await send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})
            self._last = loop.time()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream the body until it ends or the client disconnects, whichever is first."""
        try:
            async with anyio.create_task_group() as tg:

                async def stream() -> None:
                    with contextlib.suppress(OSError):  # the client is gone
                        await self.stream_response(send)
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                if self.keepalive_s is not None:
                    tg.start_soon(self._keepalive, send, self.keepalive_s)
                await self.listen_for_disconnect(receive)
                tg.cancel_scope.cancel()
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        if self.background is not None:
            await self.background()


def render(answer: Answer) -> Response:
    """The HTTP response of a dispatcher's answer.

    JSON, or an event stream that stops when its client leaves (and then runs the
    answer's clean-up).
    """
    if isinstance(answer, Whole):
        stamp_done("answer")
        return JSONResponse(answer.body, headers=answer.headers)
    return RelayResponse(
        answer.events,
        answer.keepalive_s,
        media_type="text/event-stream",
        headers=answer.headers | SSE_HEADERS,
        background=BackgroundTask(answer.close),
    )


async def answered(receive: Receive, work: Awaitable[Answer]) -> Response:
    """:func:`render` ``work``'s answer, or cancel ``work`` if the client leaves first."""

    async def rendered() -> Response:
        return render(await work)

    return await until_disconnect(receive, rendered())
