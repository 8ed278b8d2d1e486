"""``--fake-calls PATH``: the fake llama-server's log of every call it gets, in order.

One line a request, ``METHOD /path`` (``/health`` left out: the pool polls it while a
backend starts), appended when the request arrives, so a test can count the calls Fronde
makes around a generation (``GET /slots``, ``POST /tokenize`` …) and see their order.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CallLog"]


class CallLog:
    """ASGI wrapper that appends each request's ``METHOD /path`` to a file, then serves it.

    Args:
        app: the fake server's app.
        path: the file the lines go to.
    """

    def __init__(self, app: Any, path: str) -> None:
        self.app, self.path = app, path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Log an HTTP request (not ``/health``), then pass it to the app."""
        if scope["type"] == "http" and scope["path"] != "/health":
            with open(self.path, "a", encoding="utf-8") as f:  # noqa: ASYNC230 (a test fake)
                f.write(f"{scope['method']} {scope['path']}\n")
        await self.app(scope, receive, send)
