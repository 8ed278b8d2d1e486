"""HTTP client to a llama-server backend, translating httpx errors to Fronde's.

Every low-level failure becomes the most specific :class:`~fronde.errors.BackendError`
(``raise ... from exc``, as httpx's own transports map socket errors), also while a
streamed body is read (:class:`UpstreamStream`, as httpx maps its transport's errors
inside body iteration), so no transport type leaves ``fronde.backends``: the
dispatcher and the API deal in Fronde errors only.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import aiohttp
import anyio
import httpx

from fronde.backends.aiohttp_body import aiohttp_reader
from fronde.backends.aiohttp_post import aiohttp_session, encode_json, post_stream
from fronde.backends.body_tap import BodyTap
from fronde.backends.connections import KEEPALIVE_S, make_http_client
from fronde.backends.slots import Pin, SlotPins
from fronde.backends.upstream_errors import backend_error, send_once_retried, translate
from fronde.errors import (
    BackendConnectionError,
    BackendStreamError,
)
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

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, aiohttp.ClientError)
"""What reading a backend's body may raise: httpx's errors, and an aiohttp error that
httpx-aiohttp 0.2 leaves unmapped (it maps only the common ones)."""

_T = TypeVar("_T")


def split_lines(tail: bytes, part: bytes) -> tuple[list[bytes], bytes]:
    r"""``tail + part`` as (its complete lines, what follows the last ``\n``).

    Lines lose their ``\n`` and a trailing ``\r``. No byte of a multi-byte UTF-8
    character is ``\n``, so a character split across two reads stays whole.
    """
    *lines, rest = (tail + part).split(b"\n") if tail else part.split(b"\n")
    return [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines], rest


class UpstreamStream:
    """An open streamed answer from a backend (status already checked).

    Reading it raises :class:`~fronde.errors.BackendStreamError` for a body that
    breaks (a reset, a truncated chunk), never a transport type.

    Args:
        resp: the response, body unread: httpx's, or aiohttp's where Fronde asked the
            aiohttp session itself (:mod:`~fronde.backends.aiohttp_post`).
        url: the request's URL, for messages.
        settle_ms: see :attr:`settle_ms`.
        slot: see :attr:`slot`.
    """

    def __init__(
        self,
        resp: httpx.Response | aiohttp.ClientResponse,
        url: str,
        settle_ms: float = 0.0,
        slot: int | None = None,
    ) -> None:
        self._resp = resp
        self.url = url
        self.settle_ms = settle_ms
        """Time spent learning the slot of a request the server placed first, ms."""
        self.slot = slot
        """The ``id_slot`` the request was sent with; None where the server placed it."""
        self._tap: BodyTap | None = None

    def _broken(self, exc: Exception) -> BackendStreamError:
        name = type(exc).__name__
        return BackendStreamError(f"backend {self.url} failed mid-stream: {name}", cause=name)

    async def _guarded(self, parts: AsyncIterator[_T]) -> AsyncIterator[_T]:
        try:
            async for part in parts:
                yield part
        except TRANSPORT_ERRORS as exc:
            raise self._broken(exc) from exc

    async def aclose(self) -> None:
        """Close the answer now (idempotent): llama-server sees the client gone and stops.

        A body read to its end leaves its connection to the pool; one cut short closes it.
        A tap on it is closed first.
        """
        if self._tap is not None:
            self._tap.close()
        if isinstance(self._resp, aiohttp.ClientResponse):
            self._resp.release()
        else:
            await self._resp.aclose()

    @property
    def tappable(self) -> bool:
        """Whether :meth:`tap` can hand on this body (an aiohttp response)."""
        return isinstance(self._resp, aiohttp.ClientResponse)

    def tap(self, sink: Callable[[bytes], None]) -> BodyTap | None:
        """Have the body handed to ``sink`` in each read's callback (:mod:`.body_tap`).

        None where the answer came through httpx (another transport) or its body has
        ended already: then read it with :meth:`raw` or :meth:`line_batches`.
        :meth:`aclose` closes the tap.
        """
        resp = self._resp
        if not isinstance(resp, aiohttp.ClientResponse):
            return None
        try:
            self._tap = BodyTap(resp, self.url, sink)
        except ValueError:
            return None
        return self._tap

    def lines(self) -> AsyncIterator[str]:
        """The body's lines, without their line endings.

        Decoded as UTF-8 incrementally: a character split across two reads stays whole.

        Raises:
            BackendStreamError: the body broke (while iterating).
        """
        if isinstance(self._resp, aiohttp.ClientResponse):
            return self._decoded()
        return self._guarded(self._resp.aiter_lines())

    async def _decoded(self) -> AsyncIterator[str]:
        async for batch in self.line_batches():
            for line in batch:
                yield line.decode("utf-8", "replace")

    async def line_batches(self) -> AsyncIterator[list[bytes]]:
        r"""The body's complete lines, without line endings, in one list per network read.

        Lines split on ``\n`` (a trailing ``\r`` dropped), so a UTF-8 character split
        across two reads stays whole: no byte of a multi-byte character is ``\n``. A
        last line without a newline comes at the end. Reading raw pieces and splitting
        them here costs far less per event than httpx's text and line layers, and lets
        the relay forward all the events of one read in a single write.

        Raises:
            BackendStreamError: the body broke (while iterating).
        """
        tail = b""
        async for part in self.raw():
            lines, tail = split_lines(tail, part)
            if lines:
                yield lines
        if tail:
            yield split_lines(tail, b"\n")[0]  # a last line without its newline

    async def json_object(self) -> JSONObject:
        """The whole body, decoded: a non-streamed answer.

        Raises:
            BackendStreamError: the body broke.
            BackendConnectionError: it is not a JSON object.
        """
        resp = self._resp
        try:
            content = await (
                resp.read() if isinstance(resp, aiohttp.ClientResponse) else resp.aread()
            )
        except TRANSPORT_ERRORS as exc:
            raise self._broken(exc) from exc
        try:
            data: JSON = json.loads(content)
        except ValueError as exc:
            raise BackendConnectionError(
                f"backend {self.url} sent a body that is not JSON"
            ) from exc
        if not isinstance(data, dict):
            raise BackendConnectionError(f"backend {self.url} sent JSON that is not an object")
        return data

    def raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (from aiohttp's reader where there is one).

        Raises:
            BackendStreamError: the body broke (while iterating).
        """
        resp = self._resp
        if isinstance(resp, aiohttp.ClientResponse):
            return self._guarded(resp.content.iter_any())
        reader = aiohttp_reader(resp)
        parts = resp.aiter_raw() if reader is None else reader.iter_any()
        return self._guarded(parts)


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
        try:
            data: JSON = resp.json()
        except ValueError as exc:
            raise BackendConnectionError(f"backend {url} sent a body that is not JSON") from exc
        if not isinstance(data, dict):
            raise BackendConnectionError(f"backend {url} sent JSON that is not an object")
        return data

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
        upstream = UpstreamStream(resp, url, settle_ms, pin.slot if pin is not None else None)
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
                self.pins.end(base_url, pin)
