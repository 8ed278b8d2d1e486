"""The app factory: ``create_app(settings)`` builds the FastAPI app around one runtime.

The runtime (:func:`~fronde.compose.build_runtime`) holds the backends, the
router and the dispatcher; the app's lifespan runs it. Backends start in the
background, so ``/health`` can answer 503 while they load; if none comes up at all,
``on_fatal`` is called (the CLI then stops the server and exits non-zero). Errors
become HTTP here, in one place: every body is ``{"error": {"message", "type",
"param", "code"}}``, FastAPI's own 404/405/422 included (422 becomes 400, as OpenAI
answers malformed requests), except under ``/v1/messages``, where Anthropic clients
read ``{"type": "error", "error": {"type", "message"}}``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from fronde import __version__
from fronde.api.apis import COUNT_TOKENS_PATH, EMBEDDING_PATHS, agents
from fronde.api.direct import keep_server_send
from fronde.api.hot import HotRoutes
from fronde.api.middleware import GateMiddleware
from fronde.api.passthrough import NATIVE_GET, NATIVE_POST, native
from fronde.api.routes import HOT_ROUTES, router
from fronde.api.ui import ui
from fronde.backends.pool import BackendPool
from fronde.compose import Runtime, build_pool, build_runtime
from fronde.config import Settings
from fronde.errors import BackendUnavailableError, FrondeError, openai_error_body
from fronde.json_types import JSONObject
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.request.agent_apis import INFILL, MESSAGES, RESPONSES, error_body_for

__all__ = ["FrondeApp", "build_pool", "create_app"]

log = get_logger(__name__)


class FrondeApp(FastAPI):
    """FastAPI, keeping the server's own ``send`` in each scope (:mod:`fronde.api.direct`)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope, as FastAPI does."""
        if scope["type"] == "http":
            keep_server_send(scope, send)
        await super().__call__(scope, receive, send)


OPEN_PATHS = frozenset({"/", "/health", "/health/live", "/ui"})
"""Paths answered without an API key: liveness probes, the start page and the live page
(static HTML; its data comes from ``/fronde/v1/events``, which needs the key)."""

KNOWN_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        RESPONSES.path,
        MESSAGES.path,
        INFILL.path,
        *EMBEDDING_PATHS,
        COUNT_TOKENS_PATH,
        "/v1/models",
        "/health",
        "/health/live",
        "/metrics",
        "/fronde/v1/router",
        "/fronde/v1/events",
        "/fronde/v1/batch",
        "/ui",
        "/",
        *NATIVE_POST,
        *NATIVE_GET,
    }
)
"""Paths counted under their own label in ``fronde_requests_total`` (others: "other")."""

EXPOSED_HEADERS = [
    "x-fronde-mode",
    "x-fronde-class",
    "x-fronde-probe-tok-s",
    "x-fronde-request-id",
    "x-fronde-overhead-ms",
    "x-fronde-gather-ms",
    "x-fronde-settle-ms",
    "x-fronde-slot",
    "x-fronde-swap-wait-ms",
    "x-fronde-swap-fallback",
    "x-fronde-predicted-tok-s",
    "x-fronde-prediction-fed",
    "x-fronde-prediction-feed-ms",
]
"""Fronde's response headers, readable by a browser client under CORS."""


def _error_response(
    request: Request, status: int, body: JSONObject, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The error as JSON: OpenAI's body, or Anthropic's under ``/v1/messages``."""
    shaped = error_body_for(request.url.path, status, body)
    return JSONResponse(shaped, status_code=status, headers=headers)


async def _fronde_error(request: Request, error: Exception) -> Response:
    exc = cast("FrondeError", error)
    headers = dict(exc.headers)
    if isinstance(exc, BackendUnavailableError):
        headers["retry-after"] = str(exc.retry_after_s)
    if exc.status_code >= 500:
        log.warning("request.failed", path=request.url.path, error=exc.message)
    return _error_response(request, exc.status_code, exc.to_body(), headers)


async def _validation_error(request: Request, error: Exception) -> Response:
    exc = cast("RequestValidationError", error)
    errors: list[dict[str, Any]] = list(exc.errors())
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    msg = f"{'.'.join(loc) or 'body'}: {first.get('msg', 'invalid request')}"
    return _error_response(
        request,
        400,
        openai_error_body(msg, "invalid_request_error", ".".join(loc) or None, "invalid_request"),
    )


async def _http_error(request: Request, error: Exception) -> Response:
    exc = cast("StarletteHTTPException", error)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return _error_response(
        request,
        exc.status_code,
        openai_error_body(f"{request.method} {request.url.path}: {exc.detail}", kind, None, code),
        dict(exc.headers or {}),
    )


async def _unexpected_error(request: Request, exc: Exception) -> Response:
    log.exception("request.crashed", path=request.url.path)
    return _error_response(
        request,
        500,
        openai_error_body(
            f"internal error: {type(exc).__name__}", "server_error", None, "internal_error"
        ),
    )


def _add_error_handlers(app: FastAPI) -> None:
    """Every error becomes an OpenAI-shaped body (see the module docstring)."""
    app.add_exception_handler(FrondeError, _fronde_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


async def _prometheus(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    own = generate_latest(rt.metrics.registry)
    return Response(own + await rt.backend_metrics(), media_type=CONTENT_TYPE_LATEST)


def create_app(
    settings: Settings,
    pool: BackendPool | None = None,
    on_fatal: Callable[[str], None] | None = None,
    on_ready: Callable[[list[Mode]], None] | None = None,
) -> FastAPI:
    """Build the Fronde app.

    Args:
        settings: the settings tree.
        pool: a pool to use instead of :func:`~fronde.compose.build_pool`
            (tests pass one with a fake llama-server).
        on_fatal: called with a one-line reason when no backend could start.
        on_ready: called once with the modes up when the backends have started and
            at least one serves.

    Returns:
        The ASGI app; its lifespan starts and stops the backends.

    Raises:
        InstallError, ManifestError, ConfigError: from the runtime, before anything starts.
    """
    runtime = build_runtime(settings, pool, on_fatal, on_ready)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
        async with runtime.running():
            yield

    app = FrondeApp(title="Fronde", version=__version__, lifespan=lifespan)
    app.state.runtime = runtime
    _add_error_handlers(app)
    # Added first, so it is the innermost layer: CORS and the gate still wrap it.
    app.add_middleware(
        HotRoutes,
        routes=HOT_ROUTES,
        handlers=app.exception_handlers,
    )
    if settings.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.server.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=EXPOSED_HEADERS,
        )
    # Added last, so it is the outermost layer: a refused key never reaches CORS or a route.
    app.add_middleware(
        GateMiddleware,
        keys=[k.get_secret_value() for k in settings.server.api_keys],
        open_paths=OPEN_PATHS,
        known_paths=KNOWN_PATHS,
        metrics=runtime.metrics,
        stamps=settings.server.stamps,
    )
    app.add_api_route("/metrics", _prometheus, methods=["GET"], include_in_schema=False)
    for part in (router, agents, native, ui):
        app.include_router(part)
    return app
