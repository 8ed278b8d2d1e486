"""The relay forwards the events of one upstream read in one piece, whole and in order;
a stream it cuts on a stop string keeps consistent timings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from fronde.backends.client import UpstreamStream
from fronde.request.relay import OwnedStops, relay_sse
from fronde.timings import Timings

from .test_timings import per_token


class _Reads(httpx.AsyncByteStream):
    """A body that arrives in the given reads, then breaks if ``cut``."""

    def __init__(self, reads: list[bytes], *, cut: bool = False) -> None:
        self.reads = reads
        self.cut = cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.reads:
            yield part
        if self.cut:
            raise httpx.ReadError("connection reset")


def _event(text: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}}], "id": "c"}
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()


def _relayed(reads: list[bytes], *, cut: bool = False) -> list[bytes]:
    upstream = UpstreamStream(httpx.Response(200, stream=_Reads(reads, cut=cut)), "http://x")

    async def run() -> list[bytes]:
        return [piece async for piece in relay_sse(upstream, "baseline")]

    return asyncio.run(run())


def test_events_of_one_read_come_whole_in_order_in_one_piece() -> None:
    """Three events in one read: one piece, byte for byte the events, then [DONE]."""
    events = [_event(t) for t in ("a", "b", "c")]
    pieces = _relayed([b"".join(events), b"data: [DONE]\n\n"])
    assert pieces == [b"".join(events), b"data: [DONE]\n\n"]


def test_event_split_across_reads_and_utf8_stays_whole() -> None:
    """An event cut inside a multi-byte character arrives intact."""
    event = _event("héllo ✓")
    cut = event.index("✓".encode()) + 1
    stream = event + b"data: [DONE]\n\n"
    out = b"".join(_relayed([stream[:cut], stream[cut:]]))
    assert out == stream
    assert "héllo ✓" in out.decode()


def test_a_cut_stream_ends_with_the_error_event_and_no_done() -> None:
    """Events before the break go through; an in-band error event ends it, no [DONE]."""
    pieces = _relayed([_event("a") + _event("b")], cut=True)
    assert pieces[0] == _event("a") + _event("b")
    assert pieces[-1].startswith(b'\ndata: {"error"')
    assert b"[DONE]" not in b"".join(pieces)


def test_crlf_lines_lose_their_carriage_return() -> None:
    """As httpx's line iterator did: a ``\\r\\n`` ending relays as ``\\n``."""
    event = _event("a")
    pieces = _relayed([event.replace(b"\n", b"\r\n") + b"data: [DONE]\r\n\r\n"])
    assert b"".join(pieces) == event + b"data: [DONE]\n\n"


def test_a_stream_cut_on_a_stop_string_inside_a_pass_reports_a_tau() -> None:
    """The demo's edit row showed α and τ "-": cut at its fence inside a verify pass, the
    last per-token timings counted 32 accepted drafts for 22 tokens sent."""
    timings = per_token([(8, 8), (8, 8), (16, 16)])
    reads: list[bytes] = []
    for i, t in enumerate(timings):
        text = "END" if i == 21 else f"w{i} "
        chunk = {"choices": [{"index": 0, "delta": {"content": text}}], "timings": t}
        reads.append(f"data: {json.dumps(chunk)}\n\n".encode())
    upstream = UpstreamStream(httpx.Response(200, stream=_Reads(reads)), "http://x")
    reported: list[dict[str, Any]] = []
    stops = OwnedStops(["END"], chat=True)

    async def run() -> bytes:
        relayed = relay_sse(upstream, "ngram-mod", reported.append, stops=stops)
        return b"".join([piece async for piece in relayed])

    out = asyncio.run(run())
    assert b"w22" not in out and out.endswith(b"data: [DONE]\n\n")
    [t] = reported
    got = Timings.parse(t)
    assert got is not None
    assert (got.predicted_n, got.draft_n_accepted, got.draft_n) == (22, 19, 19)
    assert got.tau == pytest.approx(22 / 3)
    assert b'"draft_n_accepted": 19' in out  # the client's timings say the same


class _Generating(_Reads):
    """A body llama-server keeps writing until it is closed; records when it is."""

    def __init__(self, reads: list[bytes]) -> None:
        super().__init__(reads)
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


def test_a_stop_string_closes_the_upstream_before_the_client_reads_the_end() -> None:
    # The request leaves the load when its [DONE] passes (Sender._tracked): by then
    # llama-server must have been told to stop, not generate on for nobody.
    body = _Generating([_event("one "), _event("END"), _event("more "), _event("and more ")])
    upstream = UpstreamStream(httpx.Response(200, stream=body), "http://x")
    closed_at_done: list[bool] = []

    async def run() -> None:
        relayed = relay_sse(upstream, "baseline", stops=OwnedStops(["END"], chat=True))
        async for piece in relayed:
            if b"[DONE]" in piece:
                closed_at_done.append(body.closed)

    asyncio.run(run())
    assert closed_at_done == [True]
