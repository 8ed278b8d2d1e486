"""A backend's streamed answer asked for through aiohttp itself, under Fronde's httpx client.

Fronde reaches its backends through httpx over aiohttp (``httpx-aiohttp``). For the one call
every generation makes, the streamed POST, httpx's own request machinery costs more CPU than
the call: building the request (URL parsing and merging, headers), the auth and redirect
layers, and reading cookies from every response (``http.cookiejar``), about a sixth of
Fronde's CPU a request on the 2-core CPU under cProfile. So the streamed POST goes to the
aiohttp session under the transport directly, with the same connection pool, timeouts and
body bytes; every other call (``/props``, ``/slots``, ``/tokenize`` …) stays on httpx.

httpx keeps its transport in a private attribute. Should a release move it, or the client
run another transport (tests with ``httpx.MockTransport``), :func:`aiohttp_session` finds
nothing and the call goes through httpx as before; ``tests/unit/test_client.py`` notices.
"""

from __future__ import annotations

import json

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from fronde.backends.upstream_errors import aiohttp_error, aiohttp_stale
from fronde.json_types import JSONObject

__all__ = ["aiohttp_session", "encode_json", "post_stream"]

HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}
"""What the streamed POST says besides aiohttp's own: a JSON body, no compressed answer
(SSE bytes flow unbuffered), as :func:`~fronde.backends.client.make_http_client` asks."""


def aiohttp_session(http: httpx.AsyncClient) -> aiohttp.ClientSession | None:
    """The aiohttp session under ``http``'s transport (made now if the transport has none yet).

    None when ``http`` runs another transport, or httpx no longer keeps it where it did.
    """
    transport = getattr(http, "_transport", None)
    if not isinstance(transport, AiohttpTransport):
        return None
    if not isinstance(transport.client, aiohttp.ClientSession):
        transport.client = transport.get_client()  # as its first request would
    return transport.client


def encode_json(body: JSONObject) -> bytes:
    """``body`` as httpx's ``json=`` encodes it (compact, UTF-8, no NaN).

    Raises:
        ValueError: a float that is NaN or infinite.
    """
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


async def post_stream(
    session: aiohttp.ClientSession, url: str, data: bytes, timeouts: httpx.Timeout
) -> aiohttp.ClientResponse:
    """POST ``data`` to ``url`` and return the answer once its head came, body unread.

    A pooled connection found stale is retried once, as
    :func:`~fronde.backends.upstream_errors.send_once_retried` does for httpx.

    Args:
        session: :func:`aiohttp_session`'s.
        url: the full URL.
        data: the JSON body (:func:`encode_json`).
        timeouts: the httpx client's timeouts (connect, read, pool), as httpx-aiohttp maps
            them.

    Raises:
        BackendConnectionError, BackendTimeoutError: the connection failed or timed out
            before the head came.
    """
    limits = aiohttp.ClientTimeout(
        sock_connect=timeouts.connect, sock_read=timeouts.read, connect=timeouts.pool
    )
    for attempt in (0, 1):
        try:
            return await session.post(
                url,
                data=data,
                headers=HEADERS,
                allow_redirects=False,
                auto_decompress=False,
                compress=False,
                timeout=limits,
            )
        except aiohttp.ClientError as exc:
            if attempt == 0 and aiohttp_stale(exc):
                continue
            raise aiohttp_error(exc, url) from exc
        except TimeoutError as exc:
            raise aiohttp_error(exc, url) from exc
    raise AssertionError("unreachable: the second attempt returns or raises")
