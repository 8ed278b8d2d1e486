"""The two routes most requests take, called without FastAPI's routing layers.

A chat or text completion reaches its route function through Starlette's exception
middleware, FastAPI's exit-stack middleware, the router's match over every route, and
the route's own request wrapper and exception wrapper: 0.26–0.29 ms of one CPU on a
request that comes after an idle spell, before the route's first line, and about 0.2 ms
less to the upstream call without them (``server.stamps``, 2-core CPU;
``docs/overhead.md``). These routes take a
:class:`~starlette.requests.Request` and nothing FastAPI solves, so :class:`HotRoutes`
calls them itself for ``POST`` to their exact paths, and turns what they raise into the
response the app's exception handlers give, as Starlette's exception middleware would
(an exception no handler takes goes up to the server-error layer, as before). Every
other request, a ``HEAD`` or ``OPTIONS`` to these paths included, goes the ordinary way,
and so does every request where FastAPI traces requests (:data:`TELEMETRY`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Endpoint", "HotRoutes"]

Endpoint = Callable[[Request], Awaitable[Response]]
"""A route function that takes the request alone and returns its response."""

Handler = Callable[[Request, Exception], Any]

TELEMETRY = "fastapi.telemetry"
"""The scope key under which FastAPI's native telemetry keeps a request's span; set only
where an OpenTelemetry provider is configured. Such a request goes the ordinary way, so
that its span names its route and its endpoint as FastAPI records them."""


class HotRoutes:
    """Call ``routes[path]`` for a ``POST`` to that exact path; pass the rest to ``app``.

    Args:
        app: the wrapped ASGI app (the exception middleware and the router below it).
        routes: path → route function.
        handlers: exception class → handler, the app's ``exception_handlers``; looked up
            along the raised exception's MRO, ``Exception`` itself left to the
            server-error layer above (as Starlette's exception middleware leaves it).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Mapping[str, Endpoint],
        handlers: Mapping[Any, Handler],
    ) -> None:
        self.app = app
        self.routes = dict(routes)
        self.handlers = {k: v for k, v in handlers.items() if k is not Exception}

    def _handler(self, exc: Exception) -> Handler | None:
        for cls in type(exc).__mro__:
            handler = self.handlers.get(cls)
            if handler is not None:
                return handler
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a hot route's request here; any other goes to ``app``."""
        endpoint = self.routes.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST" or TELEMETRY in scope:
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
            await response(scope, receive, tracked)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None or started:
                raise
            response = await handler(request, exc)
            await response(scope, receive, send)
