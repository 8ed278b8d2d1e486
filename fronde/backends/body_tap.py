"""A streamed answer's body handed on in the read callback itself, not by a woken task.

Read the usual way, each network read of a relayed stream wakes the task that awaits the
reader, which then sends the bytes on through the ASGI ``send`` chain: on the 2-core CPU
that wake-up and the chain cost most of what a streamed token costs the relay
(``docs/overhead.md``: 0.139 ms a token for a Protocol-read, task-woken relay, against
0.085 for one that writes each read straight to the client's transport from
``data_received``). :class:`BodyTap` puts itself between the connection's transport and
aiohttp's protocol (``transport.set_protocol``), lets aiohttp parse each read as always
(HTTP/1.1 chunks, its read timeout, its errors), then takes what the read added to the
body out of aiohttp's reader (``read_nowait``) and hands it to a plain function, in the
same callback. The end, clean or broken, is awaited once a request
(:meth:`BodyTap.ended`). Its protocol is put back before the response is released, so a
body read to its end still leaves its connection to the pool.

Only an aiohttp response has this; :meth:`~fronde.backends.client.UpstreamStream.tap`
gives None otherwise and the body is read the usual way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import aiohttp

from fronde.errors import BackendStreamError

__all__ = ["BodyTap"]


class _TapProtocol(asyncio.Protocol):
    """aiohttp's protocol, with each read's body bytes taken out and handed on at once."""

    def __init__(self, tap: BodyTap) -> None:
        self.tap = tap
        self.inner = tap.inner

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)
        self.tap.take()

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class BodyTap:
    """Hands an aiohttp response's body to ``sink`` in the read callback (module docstring).

    Made by :meth:`~fronde.backends.client.UpstreamStream.tap`; what the reader holds
    already goes to ``sink`` at once. ``sink`` must not raise: should it, the tap stops,
    the connection is closed and :meth:`ended` raises
    :class:`~fronde.errors.BackendStreamError`.

    Args:
        resp: the response, head read, body unread (its connection still open).
        url: the request's URL, for messages.
        sink: called with each piece of the body, in order, as it arrives.

    Raises:
        ValueError: the response has no open connection (its body ended before).
    """

    def __init__(
        self, resp: aiohttp.ClientResponse, url: str, sink: Callable[[bytes], None]
    ) -> None:
        connection = resp.connection
        transport = None if connection is None else connection.transport
        inner = None if connection is None else connection.protocol
        if transport is None or inner is None or transport.is_closing():
            raise ValueError("the response has no open connection")
        self.url = url
        self.reader = resp.content
        self.inner = inner
        self.transport = transport
        self.sink = sink
        self.failed: BaseException | None = None
        self._paused = False
        self._installed = True  # the tap is the connection's protocol; sink gets the body
        transport.set_protocol(_TapProtocol(self))
        self.take()

    def take(self) -> None:
        """Hand on what the reader holds (nothing once :meth:`close` ran or it broke)."""
        if not self._installed:
            return
        try:
            data = self.reader.read_nowait()
        except Exception:  # the body broke: the reader keeps it for ended()
            return
        if data:
            try:
                self.sink(data)
            except Exception as exc:
                self.failed = exc
                self.close()
                self.transport.close()
                return
        if self.reader.is_eof():
            # aiohttp has released the connection to its pool already, in this very
            # read (the body's end callback): the next request's reads are none of ours.
            self.close()

    def pause(self) -> None:
        """Stop reading the connection (the client's buffer is full)."""
        if not self._paused:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        """Read the connection again."""
        if self._paused:
            self._paused = False
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self.transport.resume_reading()

    async def ended(self) -> None:
        """Return once the body has ended and every piece of it went to ``sink``.

        Raises:
            BackendStreamError: the body broke (a reset, a truncated chunk, the read
                timeout) or ``sink`` raised.
        """
        try:
            await self.reader.wait_eof()
        except (aiohttp.ClientError, TimeoutError) as exc:
            failed = exc if self.failed is None else self.failed
            raise self._broken(failed) from exc
        self.take()  # nothing is left, unless the end came with no read (a clean close)
        if self.failed is not None:
            raise self._broken(self.failed) from self.failed

    def _broken(self, exc: BaseException) -> BackendStreamError:
        name = type(exc).__name__
        return BackendStreamError(f"backend {self.url} failed mid-stream: {name}", cause=name)

    def close(self) -> None:
        """Give the connection its own protocol back (idempotent); ``sink`` gets no more."""
        if self._installed:
            self._installed = False
            self.resume()
            if not self.transport.is_closing():
                self.transport.set_protocol(self.inner)
