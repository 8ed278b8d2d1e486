"""Fronde's connections to its llama-servers: one pool, and never more than a server serves.

llama-server b11434 serves HTTP with cpp-httplib's thread pool
(``tools/server/server-http.cpp``): ``--threads-http`` fixed threads (by default
``max(-np + 4, cores - 1)``) and up to 1,024 more made on demand. A thread serves one
*connection* from its accept to its close, keep-alive included, so a connection that
sits in a client's pool holds a thread until the client closes it or the server's
keep-alive timeout (5 s) ends it. ``ThreadPool::enqueue`` (``vendor/cpp-httplib``) makes
a new thread only when it counts no idle one, and a thread counts itself busy only
once it has woken up: when several connections arrive at once, the ones beyond the
idle threads wait in the queue for a thread to end its connection, seconds later.

Fronde keeps its connections to a backend open (the pool) and opens several at once
when many clients start together. Measured on the 2-core CPU (SmolLM2, ``-np 32``, 32
clients streaming 8-token chat answers through ``fronde serve``, 25 s): in every run
some requests waited 5–10 s for their response head with the server idle, the new
connection made in 14 ms and its request written at once; on the H100 (gemma, c = 32,
``results/load-gpu-h100-cpu-gemma-270m-20261207-agent-fresh-all``) four clients waited
the whole 20-s window, their slots unused. So Fronde starts each llama-server with
:func:`connections_per_server` fixed HTTP threads and opens at most that many
connections to any one server (aiohttp's ``limit_per_host``): every connection then
finds a thread of its own. A request beyond them waits in Fronde's pool
(``upstream.pool_timeout_s``), where the server would have queued it anyway.
"""

from __future__ import annotations

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from fronde.config_sections import UpstreamSettings

__all__ = ["KEEPALIVE_S", "MAX_CONNECTIONS", "connections_per_server", "make_http_client"]

KEEPALIVE_S = 2.0
"""Idle pooled connections to a backend are dropped after this, seconds."""

MAX_CONNECTIONS = 512
"""Connections to every backend together."""


def connections_per_server(parallel: int) -> int:
    """The most connections Fronde opens to one llama-server, and its fixed HTTP threads.

    Four a slot and 64 more: a generation a slot, the ones queued behind them, the
    answers' hindsight calls (up to 32 at once, :data:`~fronde.request.hindsight.MAX_PENDING`),
    the slot lookups, health checks and metrics, and the idle connections of the pool.
    An idle fixed thread costs the server a stack and nothing else.

    Args:
        parallel: the server's slots (``-np``), at least 1.
    """
    return 4 * parallel + 64


def make_http_client(
    upstream: UpstreamSettings, per_server: int | None = None
) -> httpx.AsyncClient:
    """Build the one pooled client Fronde uses for all backends.

    Timeouts come from settings, never httpx's 5 s default; responses are not
    gzip-negotiated (``accept-encoding: identity``) so SSE bytes flow unbuffered.
    With ``upstream.client = "aiohttp"`` the bytes travel through aiohttp (the
    ``httpx-aiohttp`` transport) instead of httpcore: the same httpx API, about
    1 ms less per request on this CPU (``results/overhead-*``).

    Args:
        upstream: timeouts and transport.
        per_server: the most connections open to one host and port at once
            (:func:`connections_per_server`); None: no limit but :data:`MAX_CONNECTIONS`.
            Only the aiohttp transport applies it.
    """
    # llama-server (cpp-httplib) closes an idle keep-alive connection after 5 s
    # (CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND); drop ours well before that.
    limits = httpx.Limits(
        max_connections=MAX_CONNECTIONS, max_keepalive_connections=64, keepalive_expiry=KEEPALIVE_S
    )
    transport = None
    if upstream.client == "aiohttp":

        def session() -> aiohttp.ClientSession:
            """The transport's session, made at its first request (inside the event loop)."""
            connector = aiohttp.TCPConnector(
                limit=MAX_CONNECTIONS,
                limit_per_host=per_server or 0,
                keepalive_timeout=KEEPALIVE_S,
            )
            return aiohttp.ClientSession(connector=connector)

        transport = AiohttpTransport(limits=limits, client=session)
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(
            connect=upstream.connect_timeout_s,
            read=upstream.read_timeout_s,
            write=upstream.write_timeout_s,
            pool=upstream.pool_timeout_s,
        ),
        limits=limits,
        headers={"accept-encoding": "identity"},
    )
