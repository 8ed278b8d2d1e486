"""BackendClient: error translation and the one retry on a stale pooled connection."""

from __future__ import annotations

import httpx
import pytest

from fronde.backends.client import BackendClient
from fronde.errors import BackendConnectionError, BackendHTTPError, BackendTimeoutError

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
    async with c.stream("http://b", "/v1/completions", {}) as resp:
        assert (await resp.aread()) == b"data: [DONE]\n\n"
    assert len(calls) == 2
