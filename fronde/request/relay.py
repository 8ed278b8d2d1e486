"""Relay a llama-server SSE stream to the client, event by event.

Lines are forwarded as they arrive, with no buffering. The backend client's line
iterator decodes UTF-8 incrementally, so a multi-byte character split across two network
reads is never turned into U+FFFD. Once the 200 has been sent nothing can be
raised any more: a failure becomes an in-band ``data: {"error": ...}`` event and
the stream closes *without* ``[DONE]``, so a client never mistakes a crashed
backend for a finished answer (vLLM's launcher notes the same rule).

**Stop strings in streams.** llama-server b11434 holds back text that may be the
start of a stop string, and when the budget runs out in a stream it never sends it
(the non-streamed answer keeps it). So for a streamed request with ``stop`` Fronde
sends the request without ``stop`` and matches the strings itself
(:class:`~fronde.request.stops.StopMatcher`, llama-server's rule), unless the server
sends that text (patch 0009, :mod:`fronde.backends.held_stop`: a relayed stream and a
whole answer then leave the strings upstream, :func:`~fronde.request.choices.take_stops`).
Matched here, text is released as
it is decided, a match ends the answer (``finish_reason: "stop"``, the upstream
closed, which stops its generation), and held text is released at the end. The
streamed text then equals the non-streamed one. ``timings_per_token`` is asked for so
that an answer cut here still has timings to measure; they are folded by a
:class:`~fronde.timings.TimingsTrail`, so that a cut inside a verify pass does not count
drafts that were never sent.

**Several choices.** A text completion that lists several prompts is one stream of
several choices; stop strings, timings and usage are kept per choice
(:mod:`fronde.request.choices`), and the ``data: null`` events llama-server
sends between the prompts are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

from fronde.backends.client import UpstreamStream
from fronde.errors import BackendStreamError, openai_error_body
from fronde.json_types import JSONObject
from fronde.logging import get_logger
from fronde.request.choices import ChoiceBook, OwnedStops, choice_index
from fronde.stamps import stamp

__all__ = [
    "BODY_END_WAIT_S",
    "DONE_LINE",
    "OwnedStops",
    "relay_sse",
    "relay_state",
    "sse_error_event",
]

log = get_logger(__name__)

DONE_LINE = "data: [DONE]"
"""The OpenAI stream terminator."""

BODY_END_WAIT_S = 0.05
"""After ``[DONE]``, how long the relay waits for the rest of the upstream body, seconds.

llama-server writes the chunked body's last, empty chunk right after ``[DONE]`` (0.1 ms
later on loopback, 2-core CPU). Read to its end, the body leaves its connection in the
pool for the next request; closed before that, aiohttp drops the connection, and the
next request opens a new one. A body not ended by then is closed (the sender's close)."""


def sse_error_event(message: str, code: str = "backend_stream_error") -> bytes:
    """Return one SSE event carrying an OpenAI error body (``server_error``)."""
    body = openai_error_body(message, "server_error", None, code)
    return f"data: {json.dumps(body)}\n\n".encode()


def _usage_chunk(last: JSONObject, usage: JSONObject | None) -> bytes | None:
    """The final usage event (empty ``choices``) carrying ``usage``, or None without one."""
    if usage is None:
        return None
    tail: JSONObject = {**last, "choices": [], "usage": usage}
    tail.pop("timings", None)
    return f"data: {json.dumps(tail)}\n\n".encode()


class _Relay:
    """The state of one relayed stream: the last chunk, each choice's timings and usage.

    :meth:`line` turns one upstream line into what goes to the client, and says
    when the stream is over; :func:`relay_sse` drives it.
    """

    def __init__(
        self,
        on_timings: Callable[[JSONObject], None] | None,
        include_usage: bool,
        stops: OwnedStops | None,
    ) -> None:
        self.on_timings = on_timings
        self.include_usage = include_usage
        self.stops = stops
        self.usage_seen = False
        self.last: JSONObject | None = None
        self.book = ChoiceBook()
        self.dropped_null = False

    def _report(self, timings: JSONObject) -> None:
        if self.on_timings is not None:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.on_timings(timings)

    def _end(self, last: JSONObject | None) -> list[bytes]:
        """``[DONE]``, after the usage chunk when one was asked for and is missing."""
        done = DONE_LINE.encode() + b"\n\n"
        wanted = self.include_usage and not self.usage_seen and last is not None
        tail = _usage_chunk(last, self.book.usage()) if wanted and last is not None else None
        return [done] if tail is None else [tail, done]

    def _owned(self, chunk: JSONObject, stops: OwnedStops) -> tuple[list[bytes], bool]:
        """A content chunk under Fronde's stop strings: (what to send, the answer ended).

        Raises:
            TypeError: ``choices`` is not a list of objects (llama-server sends one).
        """
        choices = chunk["choices"]
        choice = choices[0] if isinstance(choices, list) else None
        if not isinstance(choice, dict):
            raise TypeError("a chunk's choices are not a list of objects")
        index = choice_index(choice)
        if index in stops.cut:
            return [], False  # its choice ended on a stop string; llama-server went on
        self.book.add_timings(index, chunk.pop("timings", None))  # per token: the latest
        self.book.add_usage(index, chunk.pop("usage", None))  # summed in the usage chunk
        over = stops.rewrite(chunk)
        timings = self.book.timings(index)
        if choice.get("finish_reason") is not None and timings is not None:
            chunk["timings"] = timings
            self._report(timings)
        self.last = chunk
        out = [f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()]
        if over:  # Fronde ended the answer: close upstream, end cleanly
            return out + self._end(chunk), True
        return out, False

    def _passed(self, line: str) -> str | None:
        """A line relayed as is, but for the usage and timings it may carry; None: drop it.

        A chunk with a choice loses its ``usage`` (llama-server puts each text
        completion's own on its last chunk): the client gets one usage chunk, the sum.
        """
        try:
            event: JSONObject = json.loads(line[6:])  # "{...": an object
        except ValueError:
            event = {}
        choices = event.get("choices")
        index = None
        first = choices[0] if isinstance(choices, list) and choices else None
        if isinstance(first, dict):
            index = choice_index(first)
        timings = event.get("timings")
        if isinstance(timings, dict):
            folded = self.book.add_timings(index, timings)
            self._report(folded if folded is not None else timings)
        if "usage" in event and choices == []:
            if not self.include_usage:
                return None  # the usage chunk the client did not ask for
            self.usage_seen = True
        elif "usage" in event:
            self.book.add_usage(index or 0, event.pop("usage"))
            line = "data: " + json.dumps(event, ensure_ascii=False)
        self.last = event or self.last
        return line

    def lines(self, batch: list[bytes]) -> tuple[list[bytes], bool]:
        """The lines of one upstream read: (what to send the client, the stream is over).

        With the stop strings upstream, an event without usage or timings and a blank
        line (not one a ``data: null`` drops) go out as their bytes, unparsed; the rest
        through :meth:`line`, up to the line that ends the stream.
        """
        out: list[bytes] = []
        for raw in batch:
            if self.stops is None and (
                (raw.startswith(b"data: {") and b'"usage"' not in raw and b'"timings"' not in raw)
                or (not raw and not self.dropped_null)
            ):
                out.append(raw + b"\n")
                continue
            pieces, over = self.line(raw.decode("utf-8", "replace"))
            out += pieces
            if over:
                return out, True
        return out, False

    def line(self, line: str) -> tuple[list[bytes], bool]:
        """One upstream line: (what to send the client, whether the stream is over)."""
        after_null, self.dropped_null = self.dropped_null, False
        if line == "data: null":
            # A prompt's "begin" result when several share a request (see
            # fronde.request.choices); the blank line that ends it goes too.
            self.dropped_null = True
            return [], False
        if after_null and not line:
            return [], False
        if self.stops is not None and line.startswith("data: {"):
            try:
                chunk: JSONObject = json.loads(line[6:])  # "{...": an object
            except ValueError:
                chunk = {}
            if chunk.get("choices"):
                return self._owned(chunk, self.stops)
            self.book.add_timings(None, chunk.get("timings"))
        if line.startswith(DONE_LINE):
            return self._end(self.last), True
        if line.startswith("data: {") and ('"usage"' in line or '"timings"' in line):
            passed = self._passed(line)
            return ([] if passed is None else [passed.encode() + b"\n"]), False
        return [line.encode() + b"\n"], False


def relay_state(on_timings: Callable[[JSONObject], None] | None, include_usage: bool) -> _Relay:
    """The state of one relayed stream with its stop strings upstream (a pushed one)."""
    return _Relay(on_timings, include_usage, None)


async def relay_sse(
    upstream: UpstreamStream,
    mode: str,
    on_timings: Callable[[JSONObject], None] | None = None,
    *,
    include_usage: bool = False,
    stops: OwnedStops | None = None,
) -> AsyncIterator[bytes]:
    """Yield the backend's SSE lines, each with its newline, as they arrive.

    The lines of one upstream read come as one piece (several events, each whole),
    so a burst costs one write to the client, not one per event.

    The stream is normalized whatever the llama-server build does: exactly one
    ``data: [DONE]`` ends it (nothing after it is relayed), no ``data: null`` event
    reaches the client, and the final usage chunk (empty ``choices``) is there if and
    only if ``include_usage`` — dropped when not asked for; when asked for and
    missing, made from the usage each choice's last chunk carried (then dropped from
    it), or its timings, summed over the choices. Once the piece with ``[DONE]`` is
    handed on, the rest of the upstream body is read (:data:`BODY_END_WAIT_S`), so that
    its connection serves the next request.

    Args:
        upstream: an open streamed answer from the backend (status already checked).
        mode: the backend's mode, for the log and the error message.
        on_timings: called with llama-server's ``timings`` when an event carries them
            (the last one does); only those few lines are parsed (unless ``stops``).
        include_usage: the client's ``stream_options.include_usage``.
        stops: stop strings Fronde applies itself, per choice (the upstream request
            had none); every chunk is then parsed.

    Yields:
        Encoded lines, those of one read joined; on failure a final error event (a
        piece of its own) instead of ``[DONE]``.
    """
    relay = _Relay(on_timings, include_usage, stops)
    batches = upstream.line_batches()
    try:
        async for batch in batches:
            stamp("event")
            # The events of one read leave in one piece (one write to the client).
            out, over = relay.lines(batch)
            if over and stops is not None:
                # Fronde's stop string ended the answer while llama-server generates on:
                # stop it before the client reads the end (the request then leaves the
                # load, Sender._tracked).
                await upstream.aclose()
            elif over:
                upstream.release_slot()  # llama-server has freed it: before the client's next
            if out:
                yield b"".join(out)
            if over:
                if stops is None:  # else closed above
                    await _read_to_end(batches)
                return
    except BackendStreamError as exc:
        log.error("stream.broken", mode=mode, error=exc.message)
        yield b"\n" + sse_error_event(f"backend {mode} failed mid-stream: {exc.cause}")
        return
    log.error("stream.truncated", mode=mode)
    yield b"\n" + sse_error_event(f"backend {mode} closed the stream before [DONE]")


async def _read_to_end(batches: AsyncIterator[list[bytes]]) -> None:
    """Read what is left of an answer after its ``[DONE]``, for :data:`BODY_END_WAIT_S` at most.

    Runs once the piece with ``[DONE]`` has been handed on, so the client has it first.
    Nothing read is relayed; a body that breaks or has not ended in time is left to the
    sender, which closes it.
    """
    with contextlib.suppress(TimeoutError, BackendStreamError):
        async with asyncio.timeout(BODY_END_WAIT_S):
            async for _ in batches:
                pass
