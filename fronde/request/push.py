"""A relayed stream pushed to the client from the upstream's read callback.

The route most requests take, a stream relayed from one mode's server with its stop
strings left upstream, needs nothing awaited between an upstream read and the write to
the client. Here each read of the body (:class:`~fronde.backends.body_tap.BodyTap`) goes
through the relay's rules (``fronde.request.relay._Relay``: the same normalized stream
as :func:`~fronde.request.relay.relay_sse` yields), is counted as progress, and is
written to the client's transport in the same callback (:class:`ClientSink`, which the
API layer gives where the server lets it). One task awaits the end, once a request; it
wakes for nothing else unless the client's buffer fills (the upstream read is then paused
until it drains).

Where either end has no such access (another HTTP client or server, stop strings
matched by Fronde), the answer is iterated as before: :class:`PushRelay` is only ever
an alternative to the stream's own iterator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from fronde.backends.body_tap import BodyTap
from fronde.backends.client import UpstreamStream, split_lines
from fronde.errors import BackendStreamError
from fronde.json_types import JSONObject
from fronde.logging import get_logger
from fronde.request.admission import Admission
from fronde.request.relay import BODY_END_WAIT_S, DONE_LINE, relay_state, sse_error_event
from fronde.stamps import current_stamps

__all__ = ["DONE_BYTES", "ClientSink", "PushRelay", "count_piece"]

log = get_logger(__name__)

DONE_BYTES = DONE_LINE.encode()
DONE_INSIDE = b"\n" + DONE_BYTES
ERROR_PREFIX = b'\ndata: {"error"'


def count_piece(adm: Admission, piece: bytes) -> bool:
    """Count ``piece``'s events as progress; whether it holds the stream's ``[DONE]``.

    A piece may hold several events (one upstream read); a relay's own error event
    comes alone and is not progress.
    """
    n = piece.count(b"\ndata: {") + piece.startswith(b"data: {")
    if n and not piece.startswith(ERROR_PREFIX):
        adm.progress(n)
    return piece.startswith(DONE_BYTES) or DONE_INSIDE in piece


class ClientSink(Protocol):
    """Where a pushed stream's bytes go: the client's connection, written at once."""

    def write(self, data: bytes) -> None:
        """Send ``data`` as the body's next piece (nothing once the client has gone)."""
        ...

    @property
    def paused(self) -> bool:
        """Whether the client's buffer is full (stop reading the upstream)."""
        ...

    async def drain(self) -> None:
        """Return once the client's buffer has room again."""
        ...


class PushRelay:
    """One relayed OpenAI stream, pushed (see the module docstring).

    Args:
        adm: the request's admission: progress, and its end with ``[DONE]``.
        upstream: the open answer (its body unread; :attr:`UpstreamStream.tappable`).
        mode: the backend's mode, for the log and the error message.
        on_timings: called with llama-server's ``timings`` when an event carries them.
        include_usage: the client's ``stream_options.include_usage``.
        capture: where each piece sent goes too (the answer's hindsight), or None.
        after: run when the stream has ended with ``[DONE]``, before the clean-up.
        cleanup: closes the upstream and uncounts the generation; run once, at the end.

    Attributes:
        sent: pieces written to the client so far (the keep-alive's clock reads it).
    """

    def __init__(
        self,
        adm: Admission,
        upstream: UpstreamStream,
        mode: str,
        on_timings: Callable[[JSONObject], None] | None,
        *,
        include_usage: bool,
        capture: list[bytes] | None,
        after: Callable[[], None],
        cleanup: Callable[[], Awaitable[None]],
    ) -> None:
        self.adm = adm
        self.upstream = upstream
        self.mode = mode
        self.relay = relay_state(on_timings, include_usage)
        self.capture = capture
        self.after = after
        self.cleanup = cleanup
        self.sent = 0
        self.over = False
        self._tail = b""
        self._sink: ClientSink | None = None
        self._tap: BodyTap | None = None
        self._deadline: asyncio.Timeout | None = None
        self._resuming: asyncio.Task[None] | None = None
        self._stamps = current_stamps()

    def feed(self, part: bytes) -> None:
        r"""One read of the upstream body: relay its complete lines, write them at once.

        Lines split as :meth:`UpstreamStream.line_batches` splits them
        (:func:`~fronde.backends.client.split_lines`); an incomplete last line waits for
        the next read.
        """
        if self.over:
            return  # after [DONE]: the rest of the body is read, not relayed
        lines, self._tail = split_lines(self._tail, part)
        if not lines:
            return
        out, self.over = self.relay.lines(lines)
        if out:
            self._send(b"".join(out))

    def _send(self, piece: bytes) -> None:
        """Count ``piece``, end the request with ``[DONE]``, write it to the client."""
        if self._stamps is not None:
            self._stamps.mark("event")
        if count_piece(self.adm, piece):
            # The backend has finished: out of the load before the client reads the
            # end and comes back (Admission.release); the rest of the body gets a while.
            self.adm.close("done")
            self.upstream.release_slot()  # and its slot, free on the server already
            if self._deadline is not None:
                loop = asyncio.get_running_loop()
                self._deadline.reschedule(loop.time() + BODY_END_WAIT_S)
        if self.capture is not None:
            self.capture.append(piece)
        sink = self._sink
        if sink is None:
            raise RuntimeError("a pushed stream fed before it runs")
        sink.write(piece)
        self.sent += 1
        if self._stamps is not None:
            self._stamps.mark("byte")
            self._stamps.log()
        if sink.paused and self._tap is not None and self._resuming is None:
            self._tap.pause()
            self._resuming = asyncio.ensure_future(self._resume(sink, self._tap))

    async def _resume(self, sink: ClientSink, tap: BodyTap) -> None:
        """Read the upstream again once the client's buffer has drained."""
        try:
            await sink.drain()
        finally:
            self._resuming = None
            tap.resume()

    async def run(self, sink: ClientSink) -> None:
        """Relay the whole answer to ``sink``; then the end of the request.

        A body that breaks, or ends before ``[DONE]``, ends the stream with an in-band
        error event (no ``[DONE]``), as :func:`~fronde.request.relay.relay_sse` does. A
        body not ended :data:`~fronde.request.relay.BODY_END_WAIT_S` after ``[DONE]`` is
        closed. Cancelled (the client left), the request ends ``cancelled``.
        """
        self._sink = sink
        outcome = "error"
        try:
            error = await self._relayed()
            if self.over:
                outcome = "done"
                self.after()
            else:
                self._send(b"\n" + sse_error_event(error))
        except BaseException:
            outcome = "cancelled"
            raise
        finally:
            if self._resuming is not None:
                self._resuming.cancel()
            self.adm.close(outcome, None if outcome != "error" else "error in the stream")
            with anyio.CancelScope(shield=True):  # see Sender.send
                await self.cleanup()

    async def _relayed(self) -> str:
        """Tap the body and await its end; the error message for a stream without ``[DONE]``."""
        try:
            async with asyncio.timeout(None) as self._deadline:
                self._tap = self.upstream.tap(self.feed)
                if self._tap is not None:
                    await self._tap.ended()
                else:  # the whole body came with its head: it is read as it lies
                    async for part in self.upstream.raw():
                        self.feed(part)
        except TimeoutError:
            return ""  # [DONE] went out; the body's end did not come in time
        except BackendStreamError as exc:
            if not self.over:
                log.error("stream.broken", mode=self.mode, error=exc.message)
            return f"backend {self.mode} failed mid-stream: {exc.cause}"
        if self._tail and not self.over:
            last, self._tail = self._tail, b""
            self.feed(last + b"\n")  # a last line without its newline
        if not self.over:
            log.error("stream.truncated", mode=self.mode)
        return f"backend {self.mode} closed the stream before [DONE]"
