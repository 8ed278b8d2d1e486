"""Relay a llama-server SSE stream to the client, event by event.

Lines are forwarded as they arrive, with no buffering. httpx's line iterator
decodes UTF-8 incrementally, so a multi-byte character split across two network
reads is never turned into U+FFFD. Once the 200 has been sent nothing can be
raised any more: a failure becomes an in-band ``data: {"error": ...}`` event and
the stream closes *without* ``[DONE]``, so a client never mistakes a crashed
backend for a finished answer (vLLM's launcher notes the same rule).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from fronde.errors import openai_error_body
from fronde.logging import get_logger

__all__ = ["DONE_LINE", "relay_sse", "sse_error_event"]

log = get_logger(__name__)

DONE_LINE = "data: [DONE]"
"""The OpenAI stream terminator."""


def sse_error_event(message: str, code: str = "backend_stream_error") -> bytes:
    """Return one SSE event carrying an OpenAI error body (``server_error``)."""
    body = openai_error_body(message, "server_error", None, code)
    return f"data: {json.dumps(body)}\n\n".encode()


async def relay_sse(
    resp: httpx.Response, mode: str, on_timings: Callable[[dict[str, Any]], None] | None = None
) -> AsyncIterator[bytes]:
    """Yield the backend's SSE lines, each with its newline, as they arrive.

    Args:
        resp: an open streaming response from the backend (status already checked).
        mode: the backend's mode, for the log and the error message.
        on_timings: called with llama-server's ``timings`` when an event carries them
            (the last one does); only those few lines are parsed.

    Yields:
        Encoded lines; on failure a final error event instead of ``[DONE]``.
    """
    done = False
    try:
        async for line in resp.aiter_lines():
            if line.startswith(DONE_LINE):
                done = True
            elif on_timings is not None and '"timings"' in line and line.startswith("data: "):
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    on_timings(json.loads(line[6:])["timings"])
            yield line.encode() + b"\n"
    except httpx.HTTPError as exc:
        log.error("stream.broken", mode=mode, error=f"{type(exc).__name__}: {exc}")
        yield b"\n" + sse_error_event(f"backend {mode} failed mid-stream: {type(exc).__name__}")
        return
    if not done:
        log.error("stream.truncated", mode=mode)
        yield b"\n" + sse_error_event(f"backend {mode} closed the stream before [DONE]")
