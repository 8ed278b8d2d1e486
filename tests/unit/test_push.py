"""A relayed stream pushed from the upstream's reads: the tap, the relay, the client's sink.

The upstream here is a raw TCP server that writes a chunked HTTP/1.1 answer piece by
piece (cut, stalled or closed at will); Fronde's side is the real aiohttp session.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import aiohttp
import httpx
import pytest
import uvicorn

from fronde.api.direct import SERVER_SEND, UvicornSink, direct_sink, keep_server_send
from fronde.backends.body_tap import BodyTap
from fronde.backends.client import UpstreamStream
from fronde.errors import BackendStreamError
from fronde.request.admission import Admission
from fronde.request.push import PushRelay
from fronde.request.relay import BODY_END_WAIT_S, relay_sse

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
END = b"0\r\n\r\n"


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def event(text: str, **extra: Any) -> bytes:
    """One OpenAI chat chunk as llama-server streams it."""
    body = {"id": "c", "choices": [{"index": 0, "delta": {"content": text}}], **extra}
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n".encode()


DONE = b"data: [DONE]\n\n"

Writes = list[bytes | float]
"""What the upstream does after the request: bytes written, or seconds slept."""


@asynccontextmanager
async def upstream(*answers: Writes) -> AsyncGenerator[tuple[str, list[int]]]:
    """A raw HTTP server giving each request the next answer; (its URL, connections made).

    An answer that does not end with :data:`END` is followed by closing the connection.
    """
    queue = list(answers)
    connections: list[int] = []

    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writers.append(writer)
        try:
            await answers_on(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        finally:
            writer.close()

    async def answers_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while queue:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length")
            )
            await reader.readexactly(length)
            writes = queue.pop(0)
            writer.write(HEAD)
            for step in writes:
                if isinstance(step, bytes):
                    writer.write(step)
                else:
                    await writer.drain()
                    await asyncio.sleep(step)
            await writer.drain()
            if not writes or writes[-1] != END:
                return

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", connections
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await asyncio.sleep(0)


async def answer(session: aiohttp.ClientSession, url: str) -> aiohttp.ClientResponse:
    """POST a streamed request; the response with its head read."""
    return await session.post(url + "/v1/chat/completions", data=b"{}")


def test_the_tap_hands_on_each_read_in_order_and_leaves_the_connection_to_the_pool() -> None:
    pieces = [event("red"), event("green"), event("blue") + DONE]

    async def run() -> tuple[list[bytes], list[bytes], int]:
        writes: Writes = [chunk(pieces[0]), 0.02, chunk(pieces[1]), 0.02, chunk(pieces[2]), END]
        async with (
            upstream(writes, list(writes)) as (url, connections),
            aiohttp.ClientSession() as session,
        ):
            got: list[list[bytes]] = []
            for _ in range(2):
                seen: list[bytes] = []
                resp = await answer(session, url)
                tap = BodyTap(resp, url, seen.append)
                await tap.ended()
                tap.close()
                resp.release()
                got.append(seen)
            return got[0], got[1], len(connections)

    first, second, connections = asyncio.run(run())
    assert b"".join(first) == b"".join(pieces) == b"".join(second)
    assert len(first) == 3  # one call a read, not one for the whole body
    assert connections == 1


@pytest.mark.parametrize(
    "writes",
    [
        [chunk(event("red")), b"40\r\ndata: {"],  # cut inside a chunk
        [chunk(event("red"))],  # closed with no last chunk
    ],
)
def test_a_body_that_breaks_ends_the_tap_with_a_stream_error(writes: Writes) -> None:
    async def run() -> tuple[list[bytes], BackendStreamError]:
        async with upstream(writes) as (url, _), aiohttp.ClientSession() as session:
            seen: list[bytes] = []
            tap = BodyTap(await answer(session, url), url, seen.append)
            with pytest.raises(BackendStreamError) as err:
                await tap.ended()
            return seen, err.value

    seen, err = asyncio.run(run())
    assert b"".join(seen).startswith(event("red"))
    assert "failed mid-stream" in err.message


def test_a_stalled_body_ends_the_tap_at_the_read_timeout() -> None:
    async def run() -> float:
        timeout = aiohttp.ClientTimeout(sock_read=0.3)
        async with (
            upstream([chunk(event("red")), 5.0]) as (url, _),
            aiohttp.ClientSession(timeout=timeout) as session,
        ):
            tap = BodyTap(await answer(session, url), url, lambda _: None)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(BackendStreamError):
                await tap.ended()
            return loop.time() - t0

    assert 0.2 < asyncio.run(run()) < 3.0


class _Adm:
    """The part of an :class:`Admission` a relay uses: progress and its end."""

    def __init__(self) -> None:
        self.events = 0
        self.outcomes: list[str] = []

    def progress(self, events: int = 1) -> None:
        self.events += events

    def close(self, status: str, error: str | None = None) -> None:
        self.outcomes.append(status)


class _Sink:
    """A client that keeps what it is sent, and when the admission ended by then."""

    def __init__(self, adm: _Adm) -> None:
        self.adm = adm
        self.pieces: list[bytes] = []
        self.ended_before: list[bool] = []
        self.paused = False

    def write(self, data: bytes) -> None:
        self.pieces.append(data)
        self.ended_before.append(bool(self.adm.outcomes))

    async def drain(self) -> None:
        return None


async def pushed(
    url: str, session: aiohttp.ClientSession, include_usage: bool = False
) -> tuple[_Sink, _Adm, list[str]]:
    """Relay one answer from ``url`` with :class:`PushRelay`; (the sink, the admission, steps)."""
    resp = await answer(session, url)
    stream = UpstreamStream(resp, url)
    adm = _Adm()
    sink = _Sink(adm)
    steps: list[str] = []

    async def cleanup() -> None:
        steps.append("cleanup")
        await stream.aclose()

    relay = PushRelay(
        cast("Admission", adm),
        stream,
        "baseline",
        None,
        include_usage=include_usage,
        capture=None,
        after=lambda: steps.append("after"),
        cleanup=cleanup,
    )
    await relay.run(sink)
    return sink, adm, steps


async def iterated(url: str, session: aiohttp.ClientSession, include_usage: bool) -> bytes:
    """The same answer through :func:`relay_sse`, the iterated relay."""
    stream = UpstreamStream(await answer(session, url), url)
    try:
        pieces = relay_sse(stream, "baseline", include_usage=include_usage)
        return b"".join([p async for p in pieces])
    finally:
        await stream.aclose()


def split_anywhere(body: bytes, rng: random.Random) -> Writes:
    """``body`` as chunks cut at random places (inside lines and characters), with pauses."""
    cuts = sorted(rng.sample(range(1, len(body)), 6))
    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    writes: Writes = []
    for part in parts:
        writes += [chunk(part), 0.005]
    return [*writes, END]


def test_a_pushed_stream_equals_the_iterated_one_however_the_reads_fall() -> None:
    counts = {"prompt_tokens": 3, "completion_tokens": 2}
    usage: dict[str, object] = {"choices": [], "usage": counts}
    last = event("é✓", timings={"predicted_n": 2, "predicted_ms": 4.0})
    body = event("red") + event("grün") + last + f"data: {json.dumps(usage)}\n\n".encode() + DONE
    rng = random.Random(7)

    async def run(include_usage: bool) -> tuple[bytes, bytes, _Sink, _Adm, list[str]]:
        writes = split_anywhere(body, rng)
        async with upstream(writes, list(writes)) as (url, _), aiohttp.ClientSession() as s:
            sink, adm, steps = await pushed(url, s, include_usage)
            return b"".join(sink.pieces), await iterated(url, s, include_usage), sink, adm, steps

    for include_usage in (True, False):
        push, iterate, sink, adm, steps = asyncio.run(run(include_usage))
        assert push == iterate
        assert push.endswith(DONE) and "é✓".encode() in push
        assert (b'"usage"' in push) is include_usage
        assert adm.outcomes[0] == "done" and sink.ended_before[-1]  # out of the load first
        assert adm.events == 3 + include_usage
        assert steps == ["after", "cleanup"]


@pytest.mark.parametrize("cut", [True, False])
def test_a_stream_without_done_ends_with_an_error_event(cut: bool) -> None:
    writes: Writes = [chunk(event("red")), b"40\r\ndata: {"] if cut else [chunk(event("red")), END]

    async def run() -> tuple[_Sink, _Adm, list[str]]:
        async with upstream(writes) as (url, _), aiohttp.ClientSession() as s:
            return await pushed(url, s)

    sink, adm, steps = asyncio.run(run())
    text = b"".join(sink.pieces)
    assert text.startswith(event("red"))
    assert b'"error"' in sink.pieces[-1] and DONE not in text
    assert adm.outcomes[-1] == "error"
    assert steps == ["cleanup"]  # no hindsight for a broken answer


def test_a_body_left_open_after_done_is_closed_after_the_wait() -> None:
    async def run() -> tuple[_Sink, float]:
        writes: Writes = [chunk(event("red") + DONE), 5.0, END]
        async with upstream(writes) as (url, _), aiohttp.ClientSession() as s:
            t0 = asyncio.get_running_loop().time()
            sink, _, _ = await pushed(url, s)
            return sink, asyncio.get_running_loop().time() - t0

    sink, spent = asyncio.run(run())
    assert b"".join(sink.pieces).endswith(DONE)
    assert spent < BODY_END_WAIT_S + 1.0


def test_direct_sink_is_none_outside_uvicorn() -> None:
    async def send(message: Any) -> None:
        return None

    scope: dict[str, Any] = {"type": "http"}
    assert direct_sink(scope) is None
    keep_server_send(scope, send)
    assert scope[SERVER_SEND] is send and direct_sink(scope) is None


def test_a_uvicorn_sink_writes_chunks_the_client_reads_as_one_body() -> None:
    """Under uvicorn (httptools) the sink writes between a head and an end sent the ASGI way."""
    found: list[object] = []

    async def app(scope: Any, receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            return
        keep_server_send(scope, send)
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        sink = direct_sink(scope)
        found.append(sink)
        if isinstance(sink, UvicornSink):
            for piece in (b"data: 1\n\n", b"data: 2\n\n"):
                sink.write(piece)
            await sink.drain()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def run() -> list[bytes]:
        config = uvicorn.Config(app, port=0, http="httptools", log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        task = asyncio.ensure_future(server.serve())
        while not server.started:  # noqa: ASYNC110 - uvicorn has no event for it
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        bodies: list[bytes] = []
        async with httpx.AsyncClient() as http:
            for _ in range(2):  # the connection kept alive after a pushed body
                bodies.append((await http.get(f"http://127.0.0.1:{port}/")).content)
        server.should_exit = True
        await task
        return bodies

    assert asyncio.run(run()) == [b"data: 1\n\ndata: 2\n\n"] * 2
    assert all(isinstance(sink, UvicornSink) for sink in found)
