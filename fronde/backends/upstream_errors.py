"""How a backend's failures become Fronde's errors, and the retry of a stale connection.

A llama-server error answer becomes a :class:`~fronde.errors.BackendHTTPError` with its
own message (:func:`backend_error`); a transport failure the most specific
:class:`~fronde.errors.BackendError` (:func:`translate`), as httpx's own transports map
socket errors; a pooled keep-alive connection the backend had closed is sent on once more
(:func:`send_once_retried`).
"""

from __future__ import annotations

import json

import aiohttp
import httpx

from fronde.errors import (
    BackendConnectionError,
    BackendError,
    BackendHTTPError,
    BackendTimeoutError,
    ContextLengthError,
)
from fronde.json_types import JSON

__all__ = ["aiohttp_error", "aiohttp_stale", "backend_error", "send_once_retried", "translate"]


def _stale_connection(exc: httpx.HTTPError) -> bool:
    """Whether ``exc`` is a pooled keep-alive connection the backend had closed.

    httpcore says ``RemoteProtocolError`` ("Server disconnected without sending a
    response"). Under the aiohttp transport it is ``ServerDisconnectedError``, or
    ``ClientOSError`` ("Can not write request body") when the close arrives while
    the request is being written; httpx-aiohttp maps both to ``ConnectTimeout`` with
    the original as ``__cause__``. A refused connection (``ClientConnectorError``,
    itself a ``ClientOSError``) is not stale.
    """
    if isinstance(exc, httpx.RemoteProtocolError):
        return True
    return aiohttp_stale(exc.__cause__)


def aiohttp_stale(exc: BaseException | None) -> bool:
    """Whether aiohttp's ``exc`` is a pooled connection the backend closed while idle.

    ``ServerDisconnectedError``, or ``ClientOSError`` while the request is written: it
    failed before any byte of an answer came, so the backend never saw the request. A
    refused connection (``ClientConnectorError``, itself a ``ClientOSError``) is not stale.
    """
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)


def aiohttp_error(exc: Exception, url: str) -> BackendError:
    """The Fronde error for aiohttp's ``exc`` (or asyncio's timeout) on a call to ``url``."""
    if isinstance(exc, TimeoutError):  # asyncio's, and aiohttp's ServerTimeoutError
        return BackendTimeoutError(f"backend {url} timed out ({type(exc).__name__})")
    return BackendConnectionError(f"backend {url} failed: {type(exc).__name__}: {exc}")


async def send_once_retried(
    http: httpx.AsyncClient, request: httpx.Request, *, stream: bool
) -> httpx.Response:
    """Send ``request``, retrying once if a pooled connection was stale.

    A keep-alive connection the backend closed while idle (a llama-server b11434
    without patch 0008 also closes one after every streamed answer) fails before
    any byte of a response arrived, so the backend never saw the request and
    sending it again is safe.
    """
    try:
        return await http.send(request, stream=stream)
    except httpx.HTTPError as exc:
        if not _stale_connection(exc):
            raise
        return await http.send(request, stream=stream)


def backend_error(resp_body: bytes, status: int) -> BackendHTTPError:
    """Turn a llama-server error answer into a :class:`BackendHTTPError`.

    llama-server answers ``{"error": {"code", "message", "type"}}``
    (``tools/server/server-common.cpp``, ``format_error_response``); a prompt over
    the context adds ``n_prompt_tokens`` and ``n_ctx`` with type
    ``exceed_context_size_error``, which becomes OpenAI's
    ``context_length_exceeded``.
    """
    try:
        data: JSON = json.loads(resp_body)
    except ValueError:
        text = resp_body.decode("utf-8", "replace").strip()
        return BackendHTTPError(text[:300] or f"backend answered HTTP {status}", status_code=status)
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, str):
        return BackendHTTPError(err, status_code=status)
    if not isinstance(err, dict):
        return BackendHTTPError(f"backend answered HTTP {status}", status_code=status)
    e = err
    said = e.get("message")
    message = said if isinstance(said, str) else None
    if e.get("type") == "exceed_context_size_error":
        n_prompt, n_ctx = e.get("n_prompt_tokens"), e.get("n_ctx")
        return ContextLengthError(
            f"the prompt has {n_prompt} tokens; the context holds {n_ctx}: shorten the prompt",
            prompt_tokens=n_prompt if isinstance(n_prompt, int) else None,
            context_tokens=n_ctx if isinstance(n_ctx, int) else None,
        )
    return BackendHTTPError(message or f"backend answered HTTP {status}", status_code=status)


def translate(exc: httpx.HTTPError, url: str) -> BackendError:
    """Map a transport failure to a Fronde error, by the aiohttp original if there is one.

    httpx-aiohttp 0.2 maps every aiohttp connection error, a refused connection
    included, to ``ConnectTimeout``; the original in ``__cause__`` tells a real
    timeout (``asyncio.TimeoutError``) from a refused or reset connection.
    """
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        return aiohttp_error(cause, url)
    if isinstance(exc, httpx.TimeoutException):
        return BackendTimeoutError(f"backend {url} timed out ({type(exc).__name__})")
    return BackendConnectionError(f"backend {url} failed: {type(exc).__name__}: {exc}")
