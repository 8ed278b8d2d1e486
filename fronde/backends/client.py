"""HTTP client to a llama-server backend, translating httpx errors to Fronde's.

Every low-level failure becomes the most specific :class:`~fronde.errors.BackendError`
(``raise ... from exc``, as httpx's own transports map socket errors), also while a
streamed body is read (:class:`~fronde.backends.upstream.UpstreamStream`), so no
transport type leaves ``fronde.backends``: the
dispatcher and the API deal in Fronde errors only.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import aiohttp
import anyio
import httpx

from fronde.backends.aiohttp_post import aiohttp_session, encode_json, post_stream
from fronde.backends.connections import KEEPALIVE_S, make_http_client
from fronde.backends.slots import Pin, SlotPins
from fronde.backends.upstream import (
    TRANSPORT_ERRORS,
    UpstreamStream,
    json_object_of,
    split_lines,
)
from fronde.backends.upstream_errors import backend_error, send_once_retried, translate
from fronde.json_types import JSON, JSONObject
from fronde.stamps import stamp

__all__ = [
    "KEEPALIVE_S",
    "TRANSPORT_ERRORS",
    "BackendClient",
    "UpstreamStream",
    "make_http_client",
    "split_lines",
]


class BackendClient:
    """Calls a backend's HTTP API through one shared :class:`httpx.AsyncClient`.

    Args:
        http: the pooled client, owned by the app's lifespan.
    """

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.in_flight: Counter[str] = Counter()
        """Requests in flight per backend base URL (balances remote replicas)."""
        self.pins = SlotPins()
        """The slot each generation runs on (none pinned until :meth:`SlotPins.count_with`)."""

    def _pin(
        self, base_url: str, path: str, body: JSONObject, early: bool
    ) -> tuple[JSONObject, Pin | None]:
        """Count the request in flight; the body to send (with ``id_slot`` when pinned).

        ``early``: its response headers come once it has a slot (a stream), not with
        its end (:meth:`SlotPins.begin`).
        """
        self.in_flight[base_url] += 1
        pin = self.pins.begin(base_url, path, body, early=early)
        if pin is not None and pin.slot is not None:
            body = {**body, "id_slot": pin.slot}
        return body, pin

    async def _settle(self, base_url: str, path: str, body: JSONObject) -> float:
        """Before pinning, learn a loose request's slot, or wait for one let go; ms spent.

        The slot of a request the server placed itself (:meth:`SlotPins.settle`), or a
        slot let go while Fronde holds them all (:meth:`SlotPins.wait_free`). Again after
        each wait: that request may have ended, and another begun, meanwhile. A wait for a
        free slot that times out sends the request without ``id_slot``.
        """
        pins = self.pins
        if not pins.unsettled(base_url, path, body) and not pins.full(base_url, path, body):
            return 0.0
        t0 = time.monotonic()
        while True:
            if pins.unsettled(base_url, path, body):
                await pins.settle(base_url, lambda: self.get_json(base_url, "/slots"))
            elif not pins.full(base_url, path, body) or not await pins.wait_free(base_url):
                break
        return (time.monotonic() - t0) * 1000

    def _unpin(self, base_url: str, pin: Pin | None) -> None:
        """The request has ended: out of the in-flight count, its slot let go."""
        self.in_flight[base_url] -= 1
        self.pins.end(base_url, pin)

    async def get_json(self, base_url: str, path: str) -> JSON:
        """GET ``base_url + path`` and return the decoded JSON.

        Raises:
            BackendConnectionError, BackendTimeoutError: transport failure.
            BackendHTTPError: status ≥ 400, with the backend's message.
        """
        url = base_url + path
        stamp(f"call {path}")
        try:
            resp = await send_once_retried(
                self.http, self.http.build_request("GET", url), stream=False
            )
        except httpx.HTTPError as exc:
            raise translate(exc, url) from exc
        stamp(f"called {path}")
        if resp.status_code >= 400:
            raise backend_error(resp.content, resp.status_code)
        data: JSON = resp.json()
        return data

    async def get_text(self, base_url: str, path: str, timeout_s: float) -> str | None:
        """GET ``base_url + path`` within ``timeout_s`` seconds: the body on a 200, else None.

        For best-effort reads (a backend's ``/metrics``): never raises for a backend
        that is down, slow or answering an error.
        """
        try:
            resp = await self.http.get(base_url + path, timeout=timeout_s)
        except (httpx.HTTPError, aiohttp.ClientError):
            return None
        return resp.text if resp.status_code == 200 else None

    async def post_json(self, base_url: str, path: str, body: JSONObject) -> JSONObject:
        """POST ``body`` as JSON and return the decoded JSON object.

        A generation is placed as :meth:`stream` places one: by the server when it is
        idle (then a request needing a pin meanwhile watches ``GET /slots`` for it,
        since a whole answer's headers come with its end), else beside the busy slots.

        Raises:
            BackendConnectionError: connection refused, reset, or a non-JSON answer.
            BackendTimeoutError: no answer within the read timeout.
            BackendHTTPError: status ≥ 400, with the backend's message.
        """
        url = base_url + path
        await self._settle(base_url, path, body)
        body, pin = self._pin(base_url, path, body, early=False)  # no headers till the end
        stamp(f"call {path}")
        try:
            request = self.http.build_request("POST", url, json=body)
            resp = await send_once_retried(self.http, request, stream=False)
        except httpx.HTTPError as exc:
            raise translate(exc, url) from exc
        finally:
            self._unpin(base_url, pin)
        stamp(f"called {path}")
        if resp.status_code >= 400:
            raise backend_error(resp.content, resp.status_code)
        return json_object_of(resp.content, url)

    @asynccontextmanager
    async def stream(
        self, base_url: str, path: str, body: JSONObject, *, whole: bool = False
    ) -> AsyncGenerator[UpstreamStream]:
        """POST ``body`` (``"stream": true``) and yield the answer with its body still unread.

        ``whole``: ``body`` asks for one JSON answer (``"stream": false``), whose
        headers come with its end; read it with :meth:`UpstreamStream.json_object`.

        On a backend with pinned slots, a generation to an idle server goes without
        ``id_slot`` (the server places it as it would alone) and the next ones beside it
        (:class:`~fronde.backends.slots.SlotPins`); the yielded stream's ``settle_ms``
        is the time spent learning that slot first.

        The status is checked before yielding, so an error that happens before the
        first byte reaches the client still becomes a proper HTTP error. The
        response is closed on exit, also when the consumer is cancelled (client
        disconnect), which closes the connection and frees the llama-server slot.

        Raises:
            BackendConnectionError, BackendTimeoutError: transport failure before the
                response headers arrived.
            BackendHTTPError: status ≥ 400.
        """
        url = base_url + path
        settle_ms = await self._settle(base_url, path, body)
        body, pin = self._pin(base_url, path, body, early=not whole)
        session = aiohttp_session(self.http)
        resp: httpx.Response | aiohttp.ClientResponse
        try:
            if session is not None:  # the same pool, without httpx's request machinery
                data = encode_json(body)
                stamp("sent")
                resp = await post_stream(session, url, data, self.http.timeout)
            else:
                request = self.http.build_request("POST", url, json=body)
                stamp("sent")
                resp = await send_once_retried(self.http, request, stream=True)
            stamp("headers")
        except BaseException as exc:
            self._unpin(base_url, pin)
            if isinstance(exc, httpx.HTTPError):
                raise translate(exc, url) from exc
            raise
        if pin is not None:
            pin.sent.set()  # b11434 answers with headers once the request has a slot
        slot = pin.slot if pin is not None else None
        upstream = UpstreamStream(
            resp, url, settle_ms, slot, release=lambda: self.pins.end(base_url, pin)
        )
        try:
            status = resp.status if isinstance(resp, aiohttp.ClientResponse) else resp.status_code
            if status >= 400:
                content = await (
                    resp.read() if isinstance(resp, aiohttp.ClientResponse) else resp.aread()
                )
                raise backend_error(content, status)
            yield upstream
        finally:
            # Shielded: on a client disconnect this runs inside a cancelled scope, where
            # an unshielded await is cancelled at once and the upstream connection
            # would stay open, the llama-server slot generating for nobody.
            self.in_flight[base_url] -= 1
            try:
                with anyio.CancelScope(shield=True):
                    await upstream.aclose()
            finally:
                upstream.release_slot()
