"""Relay a llama-server SSE stream to the client, event by event.

Lines are forwarded as they arrive, with no buffering. httpx's line iterator
decodes UTF-8 incrementally, so a multi-byte character split across two network
reads is never turned into U+FFFD. Once the 200 has been sent nothing can be
raised any more: a failure becomes an in-band ``data: {"error": ...}`` event and
the stream closes *without* ``[DONE]``, so a client never mistakes a crashed
backend for a finished answer (vLLM's launcher notes the same rule).

**Stop strings in streams.** llama-server b11434 holds back text that may be the
start of a stop string, and when the budget runs out in a stream it never sends it
(the non-streamed answer keeps it). So for a streamed request with ``stop`` Fronde
sends the request without ``stop`` and matches the strings itself
(:class:`~fronde.router.stops.StopMatcher`, llama-server's rule): text is released as
it is decided, a match ends the answer (``finish_reason: "stop"``, the upstream
closed, which stops its generation), and held text is released at the end. The
streamed text then equals the non-streamed one. ``timings_per_token`` is asked for so
that an answer cut here still has timings to measure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import anyio
import httpx
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from fronde.backends.client import TRANSPORT_ERRORS
from fronde.errors import openai_error_body
from fronde.logging import get_logger
from fronde.router.stops import StopMatcher

__all__ = [
    "CLIENT_GONE_STATUS",
    "DONE_LINE",
    "KEEPALIVE_LINE",
    "OwnedStops",
    "RelayResponse",
    "relay_sse",
    "sse_error_event",
    "until_disconnect",
    "with_keepalive",
]

log = get_logger(__name__)

DONE_LINE = "data: [DONE]"
"""The OpenAI stream terminator."""


def sse_error_event(message: str, code: str = "backend_stream_error") -> bytes:
    """Return one SSE event carrying an OpenAI error body (``server_error``)."""
    body = openai_error_body(message, "server_error", None, code)
    return f"data: {json.dumps(body)}\n\n".encode()


KEEPALIVE_LINE = b": keep-alive\n\n"
"""An SSE comment: clients ignore it, idle-timeout proxies see bytes flowing."""


def _usage_from_timings(timings: dict[str, Any]) -> dict[str, int] | None:
    """OpenAI ``usage`` from llama-server ``timings`` (prompt = cached + evaluated)."""
    try:
        prompt = int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))
        completion = int(timings["predicted_n"])
    except (KeyError, TypeError, ValueError):
        return None
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _usage_chunk(last: dict[str, Any], timings: dict[str, Any] | None) -> bytes | None:
    """The final usage event (empty ``choices``) made from ``timings``, or None."""
    usage = _usage_from_timings(timings or {})
    if usage is None:
        return None
    tail: dict[str, Any] = {**last, "choices": [], "usage": usage}
    tail.pop("timings", None)
    return f"data: {json.dumps(tail)}\n\n".encode()


class OwnedStops:
    """Stop strings Fronde applies to a relayed stream (see the module docstring).

    Args:
        stops: the request's stop strings.
        chat: True for chat chunks (``delta.content``), False for text completions.
    """

    def __init__(self, stops: list[str], *, chat: bool) -> None:
        self.matcher = StopMatcher(stops)
        self.chat = chat

    @staticmethod
    def take(body: dict[str, Any], *, chat: bool) -> tuple[dict[str, Any], OwnedStops | None]:
        """Take ``body``'s stop strings for Fronde to apply: (upstream body, stops or None).

        The upstream body has no ``stop`` and asks for ``timings_per_token``. Requests
        with tools keep their stops upstream (None): llama-server applies them to the
        raw text it parses tool calls from, which a relay cannot see.
        """
        stop = body.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        if body.get("tools") or body.get("functions") or not isinstance(stop, list):
            return body, None
        owned = [s for s in cast("list[Any]", stop) if isinstance(s, str) and s]
        if not owned:
            return body, None
        upstream = {k: v for k, v in body.items() if k != "stop"} | {"timings_per_token": True}
        return upstream, OwnedStops(owned, chat=chat)

    def _text(self, choice: dict[str, Any]) -> str:
        if self.chat:
            delta = choice.get("delta")
            piece = (
                cast("dict[str, Any]", delta).get("content") if isinstance(delta, dict) else None
            )
        else:
            piece = choice.get("text")
        return piece if isinstance(piece, str) else ""

    def _set_text(self, choice: dict[str, Any], text: str) -> None:
        if self.chat:
            delta = choice.setdefault("delta", {})
            if text or "content" in delta:
                delta["content"] = text
        else:
            choice["text"] = text

    def rewrite(self, event: dict[str, Any]) -> bool:
        """Apply the stops to one chunk in place; True when a stop string ended the answer.

        On a match the chunk keeps the text before it and gets ``finish_reason: "stop"``;
        a chunk with a ``finish_reason`` of its own also gets the text held back.
        """
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices:
            return False
        choice = cast("dict[str, Any]", choices[0])
        piece = self._text(choice)
        out = self.matcher.feed(piece) if piece else ""
        if self.matcher.stopped:
            self._set_text(choice, out)
            choice["finish_reason"] = "stop"
            return True
        if choice.get("finish_reason") is not None:
            out += self.matcher.flush()
        if piece or out:
            self._set_text(choice, out)
        return False


async def relay_sse(
    resp: httpx.Response,
    mode: str,
    on_timings: Callable[[dict[str, Any]], None] | None = None,
    *,
    include_usage: bool = False,
    stops: OwnedStops | None = None,
) -> AsyncIterator[bytes]:
    """Yield the backend's SSE lines, each with its newline, as they arrive.

    The stream is normalized whatever the llama-server build does: exactly one
    ``data: [DONE]`` ends it (nothing after it is relayed), and the final usage
    chunk (empty ``choices``) is there if and only if ``include_usage`` — dropped
    when not asked for, made from ``timings`` when asked for and missing.

    Args:
        resp: an open streaming response from the backend (status already checked).
        mode: the backend's mode, for the log and the error message.
        on_timings: called with llama-server's ``timings`` when an event carries them
            (the last one does); only those few lines are parsed (unless ``stops``).
        include_usage: the client's ``stream_options.include_usage``.
        stops: stop strings Fronde applies itself (the upstream request had none);
            every chunk is then parsed.

    Yields:
        Encoded lines; on failure a final error event instead of ``[DONE]``.
    """
    usage_seen = False
    last: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    try:
        async for line in resp.aiter_lines():
            if stops is not None and line.startswith("data: {"):
                try:
                    chunk: dict[str, Any] = json.loads(line[6:])
                except ValueError:
                    chunk = {}
                if chunk.get("choices"):
                    timings = chunk.pop("timings", None) or timings  # per token: the latest
                    if not include_usage:
                        chunk.pop("usage", None)
                    stopped = stops.rewrite(chunk)
                    final = chunk["choices"][0].get("finish_reason") is not None
                    if final and timings is not None:
                        chunk["timings"] = timings
                        if on_timings is not None:
                            with contextlib.suppress(ValueError, KeyError, TypeError):
                                on_timings(timings)
                    yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()
                    last = chunk
                    if stopped:  # Fronde ended the answer: close upstream, end cleanly
                        if include_usage and (tail := _usage_chunk(chunk, timings)):
                            yield tail
                        yield DONE_LINE.encode() + b"\n\n"
                        return
                    continue
                if isinstance(chunk.get("timings"), dict):
                    timings = chunk["timings"]
            if line.startswith(DONE_LINE):
                if (
                    include_usage
                    and not usage_seen
                    and last is not None
                    and (tail := _usage_chunk(last, timings))
                ):
                    yield tail
                yield DONE_LINE.encode() + b"\n\n"
                return
            if line.startswith("data: {") and ('"usage"' in line or '"timings"' in line):
                try:
                    event: dict[str, Any] = json.loads(line[6:])
                except ValueError:
                    event = {}
                if isinstance(event.get("timings"), dict):
                    timings = event["timings"]
                    if on_timings is not None:
                        with contextlib.suppress(ValueError, KeyError, TypeError):
                            on_timings(event["timings"])
                if "usage" in event and event.get("choices") == []:
                    if not include_usage:
                        continue  # the usage chunk the client did not ask for
                    usage_seen = True
                elif "usage" in event and not include_usage:
                    event.pop("usage")
                    line = "data: " + json.dumps(event, ensure_ascii=False)
                last = event or last
            yield line.encode() + b"\n"
    except TRANSPORT_ERRORS as exc:
        log.error("stream.broken", mode=mode, error=f"{type(exc).__name__}: {exc}")
        yield b"\n" + sse_error_event(f"backend {mode} failed mid-stream: {type(exc).__name__}")
        return
    log.error("stream.truncated", mode=mode)
    yield b"\n" + sse_error_event(f"backend {mode} closed the stream before [DONE]")


async def with_keepalive(source: AsyncIterator[bytes], interval_s: float) -> AsyncIterator[bytes]:
    """Relay ``source``, inserting :data:`KEEPALIVE_LINE` after each ``interval_s`` of silence.

    A long prefill or a probe can leave a stream silent for many seconds on a
    CPU; proxies with an idle timeout (nginx's 60 s, cloud load balancers) would
    cut it. Comments keep bytes flowing without changing the events.
    """
    it = aiter(source)
    pending: asyncio.Future[bytes] = asyncio.ensure_future(anext(it))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=interval_s)
            if not done:
                yield KEEPALIVE_LINE
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            yield item
            pending = asyncio.ensure_future(anext(it))
    finally:
        with anyio.CancelScope(shield=True):  # cleanup must run even when cancelled
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                    await pending
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                await aclose()


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


class RelayResponse(StreamingResponse):
    """A :class:`StreamingResponse` that stops the moment the client leaves.

    Starlette (ASGI spec ≥ 2.4) notices a gone client only when a ``send`` fails,
    and then leaves the body iterator suspended until garbage collection, so the
    upstream llama-server would keep generating for nobody. Here a task waits for
    ``http.disconnect`` the whole time, cancels the stream at once (the iterator's
    ``finally`` closes the upstream response, which frees the slot), and the
    iterator is always closed on the way out.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream the body until it ends or the client disconnects, whichever is first."""
        try:
            async with anyio.create_task_group() as tg:

                async def stream() -> None:
                    with contextlib.suppress(OSError):  # the client is gone
                        await self.stream_response(send)
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                await self.listen_for_disconnect(receive)
                tg.cancel_scope.cancel()
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
        if self.background is not None:
            await self.background()
