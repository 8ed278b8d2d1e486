"""An answer from a llama-server backend while it is read: its lines, its whole JSON, its tap.

:class:`UpstreamStream` raises :class:`~fronde.errors.BackendStreamError` for a body that
breaks (as httpx maps its transport's errors inside body iteration), never a transport
type, and lets its request's slot go as soon as the answer is over
(:meth:`UpstreamStream.release_slot`), before the rest of the body has been read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import aiohttp
import httpx

from fronde.backends.aiohttp_body import aiohttp_reader
from fronde.backends.body_tap import BodyTap
from fronde.errors import BackendConnectionError, BackendStreamError
from fronde.json_types import JSON, JSONObject

__all__ = ["TRANSPORT_ERRORS", "UpstreamStream", "json_object_of", "split_lines"]

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


def json_object_of(content: bytes, url: str) -> JSONObject:
    """A backend's whole answer ``content`` from ``url``, decoded.

    Raises:
        BackendConnectionError: it is not JSON, or not a JSON object.
    """
    try:
        data: JSON = json.loads(content)
    except ValueError as exc:
        raise BackendConnectionError(f"backend {url} sent a body that is not JSON") from exc
    if not isinstance(data, dict):
        raise BackendConnectionError(f"backend {url} sent JSON that is not an object")
    return data


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
        release: lets the request's slot go (the client's pin); called once, by
            :meth:`release_slot` or when the answer is closed, whichever comes first.
    """

    def __init__(
        self,
        resp: httpx.Response | aiohttp.ClientResponse,
        url: str,
        settle_ms: float = 0.0,
        slot: int | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        self._resp = resp
        self._release = release
        self.url = url
        self.settle_ms = settle_ms
        """Time spent learning the slot of a request the server placed first, ms."""
        self.slot = slot
        """The ``id_slot`` the request was sent with; None where the server placed it."""
        self._tap: BodyTap | None = None

    def release_slot(self) -> None:
        """The answer is over (its ``[DONE]`` came): let its slot go now (idempotent).

        llama-server frees the slot right after it sends the final result, so a client
        that reads ``[DONE]`` and sends its next request finds the slot free in Fronde's
        book as it is on the server: let go only when the rest of the body had been
        read, it stood held meanwhile, and that request took another slot, out of the run
        of busy ones (b11434 decodes each run of consecutive slots as a micro-batch of
        its own).
        """
        release, self._release = self._release, None
        if release is not None:
            release()

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
        return json_object_of(content, self.url)

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
