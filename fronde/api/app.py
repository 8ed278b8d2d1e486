"""The app factory: ``create_app(settings)`` builds the FastAPI app and owns its runtime.

The lifespan owns the backend pool and the one pooled :class:`httpx.AsyncClient`
to the backends. Backends start in the background, so ``/health`` can answer 503
while they load; if none comes up at all, ``on_fatal`` is called (the CLI then
stops the server and exits non-zero). Errors become HTTP here, in one place:
every body is ``{"error": {"message", "type", "param", "code"}}``, FastAPI's own
404/405/422 included (422 becomes 400, as OpenAI answers malformed requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from fronde.api.batch import batch
from fronde.api.deps import Runtime
from fronde.api.middleware import GateMiddleware
from fronde.api.passthrough import NATIVE_GET, NATIVE_POST, native
from fronde.api.routes import router
from fronde.api.ui import ui
from fronde.backends.client import BackendClient, make_http_client
from fronde.backends.pool import BackendPool, PoolPlan
from fronde.backends.swap import SwapScheduler
from fronde.config import Settings
from fronde.errors import (
    BackendUnavailableError,
    ConfigError,
    FrondeError,
    openai_error_body,
)
from fronde.logging import get_logger
from fronde.metrics import Metrics, merge_backend_metrics
from fronde.modes import Mode
from fronde.router.engine import Router
from fronde.router.shared import SharedState
from fronde.runtime.install import find_llama_binary
from fronde.runtime.local import profile_of

__all__ = ["build_pool", "create_app"]

log = get_logger(__name__)

OPEN_PATHS = frozenset({"/health", "/health/live", "/ui"})
"""Paths answered without an API key: liveness probes, and the live page (static HTML;
its data comes from ``/fronde/v1/events``, which needs the key)."""

KNOWN_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        "/health",
        "/health/live",
        "/metrics",
        "/fronde/v1/router",
        "/fronde/v1/events",
        "/fronde/v1/batch",
        "/ui",
        *NATIVE_POST,
        *NATIVE_GET,
    }
)
"""Paths counted under their own label in ``fronde_requests_total`` (others: "other")."""

LOG_RUNS_KEPT = 10
"""How many per-run backend log folders are kept under ``<cache>/logs``."""


def _run_log_dir(cache_dir: Path) -> Path:
    root = cache_dir / "logs"
    root.mkdir(parents=True, exist_ok=True)
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    for old in runs[: max(0, len(runs) - LOG_RUNS_KEPT + 1)]:
        for f in old.iterdir():
            f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            old.rmdir()
    run = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    run.mkdir(exist_ok=True)
    return run


def build_pool(settings: Settings) -> BackendPool:
    """Build (not start) the pool for ``settings``: binary, profile, one spec per mode.

    Raises:
        InstallError: no llama-server is installed and none is configured.
        ManifestError: the profile does not exist or is malformed.
    """
    if all(m in settings.remote for m in settings.modes):
        # A proxy-only host: every mode is remote, so no llama-server, model or
        # profile manifest is needed here.
        remote = {m: settings.remote[m] for m in settings.modes}
        return BackendPool.from_plan(settings, PoolPlan({}, {}, remote))
    profile = profile_of(settings)
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    return BackendPool.from_settings(settings, profile, binary, _run_log_dir(settings.cache_dir))


def _error_response(
    status: int, body: dict[str, object], headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


BACKEND_METRICS_TIMEOUT_S = 2.0
"""A backend's ``/metrics`` that takes longer is left out of that scrape, seconds."""


async def _backend_metrics(rt: Runtime) -> bytes:
    """Every ready backend's llama-server metrics, merged with a ``mode`` label."""

    async def one(mode: Mode) -> tuple[str, str]:
        try:
            url = rt.pool.get(mode).url
            resp = await rt.client.http.get(f"{url}/metrics", timeout=BACKEND_METRICS_TIMEOUT_S)
        except (FrondeError, httpx.HTTPError):
            return str(mode), ""
        return str(mode), resp.text if resp.status_code == 200 else ""

    texts = dict(await asyncio.gather(*(one(m) for m in rt.pool.ready_modes())))
    return merge_backend_metrics(texts).encode()


def create_app(
    settings: Settings,
    pool: BackendPool | None = None,
    on_fatal: Callable[[str], None] | None = None,
) -> FastAPI:
    """Build the Fronde app.

    Args:
        settings: the settings tree.
        pool: a pool to use instead of :func:`build_pool` (tests pass one with a fake
            llama-server).
        on_fatal: called with a one-line reason when no backend could start.

    Returns:
        The ASGI app; its lifespan starts and stops the backends.

    Raises:
        InstallError, ManifestError: from :func:`build_pool`, before anything starts.
    """
    the_pool = pool if pool is not None else build_pool(settings)
    if not the_pool.backends:
        reasons = "; ".join(f"{m}: {why}" for m, why in the_pool.left_out.items())
        raise ConfigError(f"no mode can run ({reasons or 'the `modes` setting is empty'})")

    swap = (
        SwapScheduler(
            the_pool,
            [m for m in Mode if m in the_pool.backends],
            max_resident=settings.swap.max_resident,
            max_epoch_s=settings.swap.max_epoch_s,
            max_wait_s=settings.swap.max_wait_s,
            fallback=settings.swap.fallback,
            policy=settings.swap.policy,
        )
        if settings.residency == "swap"
        else None
    )

    async def start_backends() -> None:
        if swap is not None:
            await swap.start()  # only the first max_resident modes come up
        else:
            await the_pool.start()
        ready = the_pool.ready_modes()
        if not ready:
            reasons = "; ".join(
                f"{mode}: {info.get('error')}" for mode, info in the_pool.status().items()
            )
            log.error("serve.no_backend", reasons=reasons)
            if on_fatal is not None:
                on_fatal(f"no llama-server backend could start ({reasons})")
        else:
            log.info(
                "serve.ready",
                modes=[str(m) for m in ready],
                upstream_client=settings.upstream.client,
            )

    router_state = Router.from_settings(settings)
    router_state.swap_residency = swap is not None
    metrics = Metrics(
        up=lambda: {str(m): m in the_pool.ready_modes() for m in the_pool.backends},
        in_flight=lambda: {str(m): n for m, n in router_state.in_flight.items()},
        queued=lambda: {str(m): len(q) for m, q in swap.queues.items()} if swap is not None else {},
        restarts=lambda: {str(m): n for m, n in the_pool.restarts.items()},
        alpha=lambda: {
            m: s["alpha_ema"]
            for m, s in router_state.measurements.snapshot(time.monotonic()).items()
            if s["alpha_ema"] is not None
        },
    )
    router_state.on_finish = metrics.finished
    if swap is not None:
        swap.on_swap = metrics.swap

    def observe(mode: Mode, timings: dict[str, Any], collapsed: bool) -> None:
        tokens = int(timings.get("predicted_n") or 0)
        metrics.generation(
            str(mode),
            tokens,
            float(timings.get("predicted_per_second") or 0.0),
            int(timings.get("draft_n") or 0),
            int(timings.get("draft_n_accepted") or 0),
        )
        if collapsed:
            metrics.quarantines.labels(str(mode)).inc()

    router_state.observer = observe

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncGenerator[None]:
        http = make_http_client(settings.upstream)
        client = BackendClient(http)
        the_pool.count_load_with(lambda url: client.in_flight[url])
        app.state.runtime = Runtime(
            settings, the_pool, client, router_state, time.time(), metrics, swap
        )
        if settings.shared.redis_url:
            router_state.shared = SharedState(
                settings.shared.redis_url,
                router_state,
                settings.shared.namespace,
                settings.shared.sync_s,
            )
            await router_state.shared.start()
        starter = asyncio.create_task(start_backends())
        try:
            yield
        finally:
            if router_state.shared is not None:
                await router_state.shared.stop()
            starter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starter
            if swap is not None:
                await swap.stop()
            await the_pool.stop()
            await http.aclose()

    app = FastAPI(title="Fronde", version="0.1.0", lifespan=lifespan)

    @app.exception_handler(FrondeError)
    async def fronde_error(request: Request, exc: FrondeError) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        headers = dict(exc.headers)
        if isinstance(exc, BackendUnavailableError):
            headers["retry-after"] = str(exc.retry_after_s)
        if exc.status_code >= 500:
            log.warning("request.failed", path=request.url.path, error=exc.message)
        return _error_response(exc.status_code, exc.to_body(), headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        errors: list[dict[str, Any]] = list(exc.errors())
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        msg = f"{'.'.join(loc) or 'body'}: {first.get('msg', 'invalid request')}"
        return _error_response(
            400,
            openai_error_body(
                msg, "invalid_request_error", ".".join(loc) or None, "invalid_request"
            ),
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return _error_response(
            exc.status_code,
            openai_error_body(
                f"{request.method} {request.url.path}: {exc.detail}", kind, None, code
            ),
            dict(exc.headers or {}),
        )

    @app.exception_handler(Exception)
    async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:  # pyright: ignore[reportUnusedFunction]
        log.exception("request.crashed", path=request.url.path)
        return _error_response(
            500,
            openai_error_body(
                f"internal error: {type(exc).__name__}", "server_error", None, "internal_error"
            ),
        )

    if settings.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.server.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=[
                "x-fronde-mode",
                "x-fronde-class",
                "x-fronde-probe-tok-s",
                "x-fronde-request-id",
                "x-fronde-overhead-ms",
                "x-fronde-swap-wait-ms",
                "x-fronde-swap-fallback",
            ],
        )

    # Added last, so it is the outermost layer: a refused key never reaches CORS or a route.
    app.add_middleware(
        GateMiddleware,
        keys=[k.get_secret_value() for k in settings.server.api_keys],
        open_paths=OPEN_PATHS,
        known_paths=KNOWN_PATHS,
        metrics=metrics,
    )

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request) -> Response:  # pyright: ignore[reportUnusedFunction]
        rt: Runtime = request.app.state.runtime
        own = generate_latest(metrics.registry)
        return Response(own + await _backend_metrics(rt), media_type=CONTENT_TYPE_LATEST)

    app.include_router(router)
    app.include_router(native)
    app.include_router(ui)
    app.include_router(batch)
    return app
