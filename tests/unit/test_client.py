"""BackendClient: error translation and the one retry on a stale pooled connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx
import pytest

from fronde.backends.aiohttp_body import aiohttp_reader
from fronde.backends.aiohttp_post import aiohttp_session
from fronde.backends.client import TRANSPORT_ERRORS, BackendClient, make_http_client
from fronde.backends.process import free_port
from fronde.config_sections import UpstreamSettings
from fronde.errors import (
    BackendConnectionError,
    BackendHTTPError,
    BackendStreamError,
    BackendTimeoutError,
)
from fronde.request.agent_apis import MESSAGES
from fronde.request.event_relay import EventRelay
from fronde.request.relay import relay_sse

pytestmark = pytest.mark.anyio


def client_with(*outcomes: httpx.Response | Exception) -> tuple[BackendClient, list[int]]:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        outcome = outcomes[min(len(calls), len(outcomes)) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return BackendClient(httpx.AsyncClient(transport=httpx.MockTransport(handler))), calls


async def test_a_stale_keepalive_connection_is_retried_once() -> None:
    stale = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    c, calls = client_with(stale, httpx.Response(200, json={"ok": True}))
    assert await c.post_json("http://b", "/v1/completions", {}) == {"ok": True}
    assert len(calls) == 2


async def test_a_second_failure_is_a_connection_error() -> None:
    stale = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    c, calls = client_with(stale, stale)
    with pytest.raises(BackendConnectionError, match="RemoteProtocolError"):
        await c.post_json("http://b", "/x", {})
    assert len(calls) == 2


async def test_refused_and_timeout_are_not_retried() -> None:
    c, calls = client_with(httpx.ConnectError("refused"))
    with pytest.raises(BackendConnectionError):
        await c.post_json("http://b", "/x", {})
    c2, calls2 = client_with(httpx.ReadTimeout("slow"))
    with pytest.raises(BackendTimeoutError):
        await c2.post_json("http://b", "/x", {})
    assert (len(calls), len(calls2)) == (1, 1)


async def test_backend_error_bodies_are_passed_on() -> None:
    body = {"error": {"code": 400, "message": "the prompt is too long", "type": "x"}}
    c, _ = client_with(httpx.Response(400, json=body))
    with pytest.raises(BackendHTTPError, match="the prompt is too long") as info:
        await c.post_json("http://b", "/x", {})
    assert info.value.status_code == 400 and info.value.error_type == "invalid_request_error"


async def test_stream_retries_a_stale_connection_too() -> None:
    stale = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    c, calls = client_with(stale, httpx.Response(200, content=b"data: [DONE]\n\n"))
    async with c.stream("http://b", "/v1/completions", {}) as upstream:
        lines = [line async for line in upstream.lines()]
    assert lines[:1] == ["data: [DONE]"]
    assert len(calls) == 2


# --- the aiohttp transport, over real sockets ----------------------------------------------


def aiohttp_client(read_timeout_s: float = 5.0) -> BackendClient:
    upstream = UpstreamSettings(client="aiohttp", read_timeout_s=read_timeout_s)
    return BackendClient(make_http_client(upstream))


async def test_aiohttp_refused_is_a_connection_error_not_a_timeout() -> None:
    # httpx-aiohttp 0.2 calls a refused connection ConnectTimeout; Fronde reads the cause.
    c = aiohttp_client()
    with pytest.raises(BackendConnectionError, match=r"refused|Cannot connect"):
        await c.post_json(f"http://127.0.0.1:{free_port()}", "/v1/completions", {})
    await c.http.aclose()


@asynccontextmanager
async def raw_server(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
) -> AsyncGenerator[str]:
    """A TCP server speaking hand-written HTTP; yields its base URL."""
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(("per_server", "most"), [(2, 2), (None, 4)])
async def test_aiohttp_opens_at_most_per_server_connections_to_a_server(
    per_server: int | None, most: int
) -> None:
    # llama-server's HTTP threads each serve one connection (connections.py): Fronde
    # must not open more to one server than it started that server with.
    open_now: list[int] = [0]
    most_open: list[int] = [0]

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        open_now[0] += 1
        most_open[0] = max(most_open[0], open_now[0])
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(0.2)
        body = b'{"ok": true}'
        head = f"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()
        open_now[0] -= 1

    upstream = UpstreamSettings(client="aiohttp")
    c = BackendClient(make_http_client(upstream, per_server))
    async with raw_server(slow) as url:
        answers = await asyncio.gather(*(c.post_json(url, "/v1/completions", {}) for _ in range(4)))
        await c.http.aclose()
    assert answers == [{"ok": True}] * 4
    assert most_open[0] == most


async def test_aiohttp_silent_backend_is_a_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.read()  # never answers; returns when the client gives up
        writer.close()

    c = aiohttp_client(read_timeout_s=0.3)
    async with raw_server(silent) as url:
        with pytest.raises(BackendTimeoutError):
            await c.post_json(url, "/v1/completions", {})
        await c.http.aclose()


async def test_aiohttp_stale_connection_is_retried_once() -> None:
    # First connection: the backend reads the request and hangs up without answering
    # (what a stale keep-alive connection looks like); the second one answers.
    seen: list[int] = []

    async def flaky(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        seen.append(1)
        if len(seen) == 1:
            writer.close()
            return
        body = b'{"ok": true}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    c = aiohttp_client()
    async with raw_server(flaky) as url:
        assert await c.post_json(url, "/v1/completions", {}) == {"ok": True}
        await c.http.aclose()
    assert len(seen) == 2


async def test_aiohttp_stream_cut_mid_body_is_a_transport_error() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            b'14\r\ndata: {"content":1}\n\r\n'
        )
        await writer.drain()
        writer.transport.abort()

    c = aiohttp_client()
    lines: list[str] = []
    async with raw_server(cut) as url:
        # A body cut mid-chunk is a Fronde error: no transport type leaves the client.
        with pytest.raises(BackendStreamError, match="failed mid-stream") as err:
            async with c.stream(url, "/completion", {}) as upstream:
                async for line in upstream.lines():
                    lines.append(line)
        assert isinstance(err.value.__cause__, TRANSPORT_ERRORS)
        await c.http.aclose()
    assert lines[:1] == ['data: {"content":1}']


async def test_aiohttp_stream_is_read_from_aiohttps_own_reader() -> None:
    """Under the aiohttp transport a streamed body comes from aiohttp's reader, whole.

    httpx-aiohttp keeps that reader in private attributes; a release that moves them
    would put httpx's four generator layers back on every streamed token (0.02 ms on
    the 2-core CPU), silently: this notices.
    """
    body = b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"

    async def sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
        for part in (body[:9], body[9:]):
            writer.write(b"%x\r\n%b\r\n" % (len(part), part))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    c = aiohttp_client()
    async with raw_server(sse) as url:
        resp = await c.http.send(c.http.build_request("POST", url + "/x"), stream=True)
        reader = aiohttp_reader(resp)
        assert reader is not None
        assert b"".join([part async for part in reader.iter_any()]) == body
        await resp.aclose()
        async with c.stream(url, "/completion", {}) as upstream:
            got = [line async for batch in upstream.line_batches() for line in batch]
        assert got == body.split(b"\n")[:-1]
        await c.http.aclose()
    assert aiohttp_reader(httpx.Response(200, content=b"x")) is None  # another transport


def aiohttp_failure(cause: Exception) -> httpx.ConnectTimeout:
    """What httpx-aiohttp 0.2 raises for an aiohttp connection error: ConnectTimeout from it."""
    try:
        raise cause
    except Exception as exc:
        try:
            raise httpx.ConnectTimeout(str(exc)) from exc
        except httpx.ConnectTimeout as mapped:
            return mapped


async def test_aiohttp_write_on_a_closed_connection_is_retried_once() -> None:
    # llama-server closed the pooled connection while the body was being written
    # (seen in CI: "ClientOSError: Can not write request body").
    broken = aiohttp_failure(aiohttp.ClientOSError(None, "Can not write request body"))
    c, calls = client_with(broken, httpx.Response(200, json={"ok": True}))
    assert await c.post_json("http://b", "/completion", {}) == {"ok": True}
    assert len(calls) == 2


async def test_aiohttp_refused_connection_is_not_retried() -> None:
    class Refused(aiohttp.ClientConnectorError):
        def __init__(self) -> None:
            OSError.__init__(self, 111, "Connection refused")

        def __str__(self) -> str:
            return "Cannot connect to host b:80 [Connection refused]"

    refused = aiohttp_failure(Refused())
    c, calls = client_with(refused, httpx.Response(200, json={"ok": True}))
    with pytest.raises(BackendConnectionError, match="Connection refused"):
        await c.post_json("http://b", "/completion", {})
    assert len(calls) == 1


async def test_a_stream_goes_to_the_aiohttp_session_and_a_stale_connection_is_retried() -> None:
    """Under the aiohttp transport the streamed POST skips httpx's request machinery.

    It goes to the session under the transport (found in httpx's private ``_transport``:
    a release that moves it sends streams back through httpx, slower, and this notices),
    with the body httpx would send, and retries a stale pooled connection once.
    """
    seen: list[bytes] = []

    async def flaky_sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length")
        )
        seen.append(head + await reader.readexactly(length))
        if len(seen) == 1:
            writer.close()  # read, then hung up: a stale keep-alive connection
            return
        body = b"data: 1\n\ndata: [DONE]\n\n"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    c = aiohttp_client()
    assert aiohttp_session(c.http) is not None
    assert aiohttp_session(httpx.AsyncClient()) is None  # httpx's own transport: httpx path
    async with raw_server(flaky_sse) as url:
        async with c.stream(url, "/completion", {"prompt": "é", "n": 1}) as upstream:
            lines = [line async for line in upstream.lines()]
        await c.http.aclose()
    assert lines == ["data: 1", "", "data: [DONE]", ""]
    assert len(seen) == 2
    head, _, body = seen[1].partition(b"\r\n\r\n")
    assert body == '{"prompt":"é","n":1}'.encode()  # as httpx's json= encodes it
    assert b"content-type: application/json" in head.lower()
    assert b"accept-encoding: identity" in head.lower()


# --- the slot let go at the answer's end ---------------------------------------------------


async def test_a_slot_let_go_at_done_is_not_let_go_again_when_the_body_closes() -> None:
    """The relay lets a request's slot go at its ``[DONE]``; the next request takes that
    slot before the first body closes, and the close does not take it from that request."""
    base = "http://b"
    c, _ = client_with(httpx.Response(200, content=b"data: [DONE]\n\n"))
    c.pins.count_with(lambda _url: 4)
    c.pins.keep(base, 0)  # a held slot: the next requests are pinned beside it, not loose
    async with c.stream(base, "/v1/completions", {}) as first:
        assert first.slot == 1 and c.pins.held(base) == {0, 1}
        first.release_slot()
        assert c.pins.held(base) == {0}
        async with c.stream(base, "/v1/completions", {}) as second:
            assert second.slot == 1
            first.release_slot()  # again: nothing
            assert c.pins.held(base) == {0, 1}
        assert c.pins.held(base) == {0}
    assert c.pins.held(base) == {0}  # the first one's close: nothing more


async def test_the_relay_lets_the_slot_go_before_the_client_reads_done() -> None:
    """``relay_sse`` lets the slot go as it hands on the piece with ``[DONE]``."""

    base = "http://b"
    body = b'data: {"choices":[{"index":0,"text":"a"}]}\n\ndata: [DONE]\n\n'
    c, _ = client_with(httpx.Response(200, stream=httpx.ByteStream(body)))
    c.pins.count_with(lambda _url: 4)
    c.pins.keep(base, 0)
    seen: list[bytes] = []
    async with c.stream(base, "/v1/completions", {}) as upstream:
        async for piece in relay_sse(upstream, "baseline"):
            seen.append(piece)
            if b"[DONE]" in piece:
                assert c.pins.held(base) == {0}  # let go before the client has it
            else:
                assert c.pins.held(base) == {0, 1}
    assert any(b"[DONE]" in p for p in seen)


async def test_another_apis_relay_lets_the_slot_go_with_its_final_event() -> None:
    """A Messages stream: the slot is let go as the piece with ``message_stop`` goes on."""
    base = "http://b"
    body = (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"a"}}\n\n'
    )
    end = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    c, _ = client_with(httpx.Response(200, stream=httpx.ByteStream(body + end)))
    c.pins.count_with(lambda _url: 4)
    c.pins.keep(base, 0)
    held: list[frozenset[int]] = []
    async with c.stream(base, "/v1/messages", {}) as upstream:
        async for _piece in EventRelay(MESSAGES, "baseline").relay(upstream):
            held.append(c.pins.held(base))
        assert upstream.slot == 1
    assert held[-1] == {0}  # let go before the client has the final event
