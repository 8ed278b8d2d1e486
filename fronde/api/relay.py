"""Relay a llama-server SSE stream to the client, event by event.

Lines are forwarded as they arrive, with no buffering. httpx's line iterator
decodes UTF-8 incrementally, so a multi-byte character split across two network
reads is never turned into U+FFFD. Once the 200 has been sent nothing can be
raised any more: a failure becomes an in-band ``data: {"error": ...}`` event and
the stream closes *without* ``[DONE]``, so a client never mistakes a crashed
backend for a finished answer (vLLM's launcher notes the same rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from fronde.backends.client import TRANSPORT_ERRORS
from fronde.errors import openai_error_body
from fronde.logging import get_logger

__all__ = [
    "DONE_LINE",
    "KEEPALIVE_LINE",
    "RelayResponse",
    "relay_sse",
    "sse_error_event",
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


async def relay_sse(
    resp: httpx.Response,
    mode: str,
    on_timings: Callable[[dict[str, Any]], None] | None = None,
    *,
    include_usage: bool = False,
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
            (the last one does); only those few lines are parsed.
        include_usage: the client's ``stream_options.include_usage``.

    Yields:
        Encoded lines; on failure a final error event instead of ``[DONE]``.
    """
    usage_seen = False
    last: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    try:
        async for line in resp.aiter_lines():
            if line.startswith(DONE_LINE):
                if include_usage and not usage_seen and last is not None:
                    usage = _usage_from_timings(timings or {})
                    if usage is not None:
                        extra: dict[str, Any] = {**last, "choices": [], "usage": usage}
                        extra.pop("timings", None)
                        yield f"data: {json.dumps(extra)}\n\n".encode()
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
