"""HotRoutes: a hot route answered without the router, its errors as the handlers give them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Message, Scope

from fronde.api.hot import HotRoutes


class Refused(Exception):
    """A client mistake the app's handler turns into a 400."""


def make_app(calls: list[str]) -> FastAPI:
    """An app whose ``/hot`` goes through HotRoutes and ``/cold`` through the router."""
    app = FastAPI()

    async def refused(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": {"message": str(exc)}}, status_code=400)

    app.add_exception_handler(Refused, refused)

    async def hot(request: Request) -> Response:
        calls.append(f"hot:{request.headers.get('x-what', '')}")
        what = request.headers.get("x-what", "")
        if what == "refuse":
            raise Refused("bad field")
        if what == "crash":
            raise RuntimeError("a bug")
        if what == "late":

            async def body() -> AsyncIterator[bytes]:
                yield b"first"
                raise Refused("after the head")

            return StreamingResponse(body())
        return JSONResponse({"ok": (await request.json())["n"]})

    @app.api_route("/hot", methods=["POST", "HEAD"])
    async def hot_by_router(request: Request) -> Response:  # pyright: ignore[reportUnusedFunction]
        calls.append("router")
        return await hot(request)

    app.add_middleware(HotRoutes, routes={"/hot": hot}, handlers=app.exception_handlers)
    return app


def send(app: FastAPI, method: str, path: str, what: str = "") -> httpx.Response:
    """One request through the app in process (server errors answered as a 500)."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.request(method, path, json={"n": 3}, headers={"x-what": what})

    return asyncio.run(go())


def test_a_post_to_a_hot_path_skips_the_router() -> None:
    calls: list[str] = []
    r = send(make_app(calls), "POST", "/hot")
    assert r.status_code == 200 and r.json() == {"ok": 3}
    assert calls == ["hot:"]


def test_another_method_goes_through_the_router() -> None:
    calls: list[str] = []
    r = send(make_app(calls), "HEAD", "/hot")
    assert r.status_code == 200
    assert calls == ["router", "hot:"]


def test_an_error_becomes_the_handlers_response() -> None:
    r = send(make_app([]), "POST", "/hot", "refuse")
    assert r.status_code == 400 and r.json() == {"error": {"message": "bad field"}}


def test_an_error_no_handler_takes_goes_up_as_a_server_error() -> None:
    r = send(make_app([]), "POST", "/hot", "crash")
    assert r.status_code == 500


def test_an_error_after_the_head_is_not_answered_twice() -> None:
    with pytest.raises(Exception, match="after the head"):
        send_raising(make_app([]), "late")


def send_raising(app: FastAPI, what: str) -> httpx.Response:
    """As :func:`send`, with the app's exception raised to the caller."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.post("/hot", json={"n": 3}, headers={"x-what": what})

    return asyncio.run(go())


def test_a_traced_request_goes_through_the_router() -> None:
    calls: list[str] = []
    app = make_app(calls)

    async def go() -> int:
        async def receive() -> Message:
            return {"type": "http.request", "body": b'{"n": 1}', "more_body": False}

        sent: list[Message] = []

        async def send(message: Message) -> None:
            sent.append(message)

        scope: Scope = {
            "type": "http",
            "method": "POST",
            "path": "/hot",
            "headers": [(b"content-type", b"application/json")],
            "query_string": b"",
            "fastapi.telemetry": object(),
        }
        await app(scope, receive, send)
        return int(str(sent[0]["status"]))

    assert asyncio.run(go()) == 200
    assert calls == ["router", "hot:"]
