"""The one ASGI middleware: API-key check and request counting.

It is plain ASGI on purpose. Starlette's ``BaseHTTPMiddleware`` (what
``@app.middleware("http")`` builds) re-streams every response through a memory
channel, which hides the client's disconnect from the route: a streaming answer
then keeps its llama-server slot busy after the client has gone (measured with
the fake backend: never freed within 6 s). Here ``receive`` and ``send`` pass
straight through, so :class:`~fronde.api.asgi.RelayResponse` sees the
disconnect at once.
"""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import Counter as PromCounter
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fronde.errors import AuthenticationError
from fronde.metrics import Metrics
from fronde.request.agent_apis import error_body_for
from fronde.stamps import begin

__all__ = ["GateMiddleware"]


class GateMiddleware:
    """Refuse requests without a configured API key; count every answer.

    Args:
        app: the wrapped ASGI app.
        keys: accepted keys, sent as ``Authorization: Bearer KEY`` or ``x-api-key: KEY``
            (the anthropic SDK's header); empty turns authentication off.
        open_paths: paths served without a key (``/health`` for liveness probes).
        known_paths: paths counted under their own label; the rest count as "other".
        metrics: where ``fronde_requests_total`` lives.
        stamps: time-stamp each request (``server.stamps``, :mod:`fronde.stamps`).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: Collection[str],
        open_paths: Collection[str],
        known_paths: Collection[str],
        metrics: Metrics,
        stamps: bool = False,
    ) -> None:
        self.app = app
        self.keys = frozenset(keys)
        self.open_paths = frozenset(open_paths)
        self.known_paths = frozenset(known_paths)
        self.metrics = metrics
        self.stamps = stamps
        self._children: dict[tuple[str, str, bytes, bytes], PromCounter] = {}

    def _count(self, path: str, status: str, mode: bytes, route: bytes) -> None:
        """Count one answer in ``fronde_requests_total``: the labels' child, looked up once.

        ``labels()`` checks and joins its values on every call; the answers take a few
        label sets (paths × statuses × modes × routes), each child kept here.
        """
        key = (path, status, mode, route)
        child = self._children.get(key)
        if child is None:
            labels = (path, status, mode.decode("latin-1"), route.decode("latin-1"))
            child = self._children[key] = self.metrics.requests.labels(*labels)
        child.inc()

    def _authorized(self, scope: Scope) -> bool:
        if not self.keys or scope["path"] in self.open_paths or scope["method"] == "OPTIONS":
            return True
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                return scheme.lower() == "bearer" and token.strip() in self.keys
            if name == b"x-api-key":  # how the anthropic SDK sends its key
                return value.decode("latin-1").strip() in self.keys
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the key, then pass the request through, counting its status."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.stamps:
            begin(scope["path"])
        path = scope["path"] if scope["path"] in self.known_paths else "other"
        if not self._authorized(scope):
            exc = AuthenticationError(
                "missing or wrong API key: send `Authorization: Bearer KEY` (or `x-api-key: KEY`)"
            )
            body = error_body_for(scope["path"], 401, exc.to_body())
            response = JSONResponse(body, status_code=401, headers={"www-authenticate": "Bearer"})
            self._count(path, "401", b"", b"")
            await response(scope, receive, send)
            return

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                mode = route = b""
                for name, value in message["headers"]:  # the last of a name, as a dict keeps
                    if name == b"x-fronde-mode":
                        mode = value
                    elif name == b"x-fronde-class":
                        route = value
                self._count(path, str(message["status"]), mode, route)
            await send(message)

        await self.app(scope, receive, counting_send)
