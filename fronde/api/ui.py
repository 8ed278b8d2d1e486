"""The live page (``GET /ui``, its events ``GET /fronde/v1/events``) and the start page.

``GET /`` is a short page saying what this server is and where to go.

The page is one static HTML file (``ui.html`` beside this module) with plain
JavaScript and no build step. It reads ``/fronde/v1/events``, a server-sent
event stream of the router's state, with ``fetch`` rather than ``EventSource``
so that it can send an API key (``#key=...`` in the page's address) when the
server requires one.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import AsyncIterator
from importlib import resources

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from fronde.api.asgi import SSE_HEADERS, RelayResponse
from fronde.api.deps import RuntimeDep
from fronde.json_types import JSONObject

__all__ = ["EVENT_MIN_INTERVAL_S", "HEARTBEAT_S", "ROOT_PAGE", "state_event", "ui"]

ui = APIRouter()

EVENT_MIN_INTERVAL_S = 0.25
"""Fastest rate of state events, seconds: a stream bumps the state at every token."""

HEARTBEAT_S = 2.0
"""A state event goes out at least this often (quarantine countdowns, elapsed times)."""

_PAGE = resources.files("fronde.api").joinpath("ui.html")


def state_event(rt: RuntimeDep) -> bytes:
    """One SSE ``state`` event: the router snapshot plus the backends' states.

    Shape: ``{"router": Router.snapshot(), "backends": BackendPool.status(),
    "swap": SwapScheduler.snapshot() or None, "public_model": str, "time": unix seconds}``.
    """
    body: JSONObject = {
        "router": rt.router.snapshot(),
        "backends": rt.pool.status(),
        "swap": rt.swap.snapshot() if rt.swap is not None else None,
        "public_model": rt.settings.public_model,
        "time": time.time(),
    }
    return b"event: state\ndata: " + json.dumps(body).encode() + b"\n\n"


ROOT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Fronde</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 2em auto">
<h1>Fronde</h1>
<p>An OpenAI-compatible proxy in front of llama.cpp servers, one per speculative-decoding
mode; each request goes to the mode that decodes it fastest.</p>
<ul>
<li>Give an OpenAI client the base URL <code>{base}/v1</code>.</li>
<li><a href="/ui">/ui</a>: the live page (routing, speeds, backends).</li>
<li><a href="/v1/models">/v1/models</a>: the model name to send.</li>
<li><a href="/health">/health</a>: whether the backends are ready.</li>
</ul>
</body></html>
"""
"""``GET /``: what this server is, with the base URL to use (``{base}``: scheme and host)."""


@ui.get("/", include_in_schema=False)
async def root(request: Request) -> HTMLResponse:
    """A short page naming the base URL for an OpenAI client and linking the live page."""
    base = str(request.base_url).rstrip("/")
    return HTMLResponse(ROOT_PAGE.replace("{base}", html.escape(base)))


@ui.get("/ui", include_in_schema=False)
async def page() -> HTMLResponse:
    """The live routing page (static HTML; its data comes from ``/fronde/v1/events``)."""
    return HTMLResponse(_PAGE.read_text(encoding="utf-8"))


@ui.get("/fronde/v1/events")
async def events(rt: RuntimeDep) -> RelayResponse:
    """Server-sent ``state`` events: one at once, then on each change, throttled.

    A change (a request planned, a token streamed, a result recorded, a request
    ended) is sent at most every :data:`EVENT_MIN_INTERVAL_S`; with no change, a
    heartbeat every :data:`HEARTBEAT_S` refreshes elapsed times and countdowns.
    The stream ends when the client leaves.
    """

    async def stream() -> AsyncIterator[bytes]:
        seen, sent = -1, 0.0
        while True:
            now = time.monotonic()
            changed = rt.router.version != seen
            if (changed and now - sent >= EVENT_MIN_INTERVAL_S) or now - sent >= HEARTBEAT_S:
                seen, sent = rt.router.version, now
                yield state_event(rt)
            await anyio.sleep(EVENT_MIN_INTERVAL_S / 2)

    return RelayResponse(
        stream(),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
