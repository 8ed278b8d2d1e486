"""The OpenAI-compatible routes: chat and text completions, models, health.

Routes stay thin: parse the body, ask the router for a mode, forward to that
mode's backend, and put the decision in the ``x-fronde-mode`` and
``x-fronde-class`` headers of every response.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from fronde.api.deps import RuntimeDep
from fronde.api.relay import relay_sse
from fronde.errors import FrondeError, InvalidRequestError
from fronde.modes import Mode
from fronde.router.choice import MODEL_PREFIX, decide

__all__ = ["router"]

router = APIRouter()

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


async def _read_body(request: Request) -> dict[str, Any]:
    """Parse the JSON object body.

    Raises:
        InvalidRequestError: not JSON, not an object, or ``stream``/``model`` ill-typed.
    """
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    typed: dict[str, Any] = body  # pyright: ignore[reportUnknownVariableType]
    if "stream" in typed and not isinstance(typed["stream"], bool):
        raise InvalidRequestError("'stream' must be a boolean", param="stream")
    if "model" in typed and not isinstance(typed["model"], str):
        raise InvalidRequestError("'model' must be a string", param="model")
    return typed


async def _forward(request: Request, rt: RuntimeDep, path: str, body: dict[str, Any]) -> Response:
    decision = decide(
        request.headers.get("x-fronde-mode"), body.get("model"), rt.settings.default_mode
    )
    headers = {"x-fronde-mode": str(decision.mode), "x-fronde-class": str(decision.route_class)}
    try:
        return await _send(rt, path, body, decision.mode, headers)
    except FrondeError as exc:
        exc.headers.update(headers)  # an error still says which mode was chosen
        raise


async def _send(
    rt: RuntimeDep, path: str, body: dict[str, Any], mode: Mode, headers: dict[str, str]
) -> Response:
    backend = rt.pool.get(mode)
    if not body.get("stream", False):
        data = await rt.client.post_json(backend.url, path, body)
        return JSONResponse(data, headers=headers)
    stack = AsyncExitStack()
    # Open the upstream before answering: a failure before the first byte is
    # still an ordinary HTTP error (raised here), not a broken 200 stream.
    resp = await stack.enter_async_context(rt.client.stream(backend.url, path, body))

    async def events() -> AsyncIterator[bytes]:
        try:
            async for chunk in relay_sse(resp, str(mode)):
                yield chunk
        finally:
            # Also runs when the client disconnects (Starlette cancels us): the
            # upstream connection closes and llama-server frees the slot.
            await stack.aclose()

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers=headers | {"cache-control": "no-cache", "x-accel-buffering": "no"},
        background=BackgroundTask(stack.aclose),
    )


@router.post(CHAT_PATH)
async def chat_completions(request: Request, rt: RuntimeDep) -> Response:
    """OpenAI ``POST /v1/chat/completions``, streamed or not."""
    body = await _read_body(request)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequestError("'messages' must be a non-empty array", param="messages")
    return await _forward(request, rt, CHAT_PATH, body)


@router.post(COMPLETIONS_PATH)
async def completions(request: Request, rt: RuntimeDep) -> Response:
    """OpenAI ``POST /v1/completions`` (legacy text completions), streamed or not."""
    body = await _read_body(request)
    if not isinstance(body.get("prompt"), str | list):
        raise InvalidRequestError("'prompt' must be a string or an array", param="prompt")
    return await _forward(request, rt, COMPLETIONS_PATH, body)


@router.get("/v1/models")
async def list_models(rt: RuntimeDep) -> dict[str, Any]:
    """OpenAI ``GET /v1/models``: ``fronde`` (routed) and ``fronde:<mode>`` per mode.

    Modes left out of this pool are listed under ``unavailable`` with the reason,
    outside ``data`` so that tools offering a model picker do not offer them.
    """
    created = int(rt.started_at)
    ids = [rt.settings.public_model] + [f"{MODEL_PREFIX}{m}" for m in Mode if m in rt.pool.backends]
    return {
        "object": "list",
        "data": [
            {"id": i, "object": "model", "created": created, "owned_by": "fronde"} for i in ids
        ],
        "unavailable": [
            {"id": f"{MODEL_PREFIX}{m}", "reason": reason} for m, reason in rt.pool.left_out.items()
        ],
    }


@router.get("/health")
async def health(rt: RuntimeDep) -> JSONResponse:
    """Proxy and backend states; 200 once the default mode's backend is ready, else 503."""
    ready = rt.settings.default_mode in rt.pool.ready_modes()
    body = {
        "status": "ok" if ready else "unavailable",
        "default_mode": str(rt.settings.default_mode),
        "uptime_s": round(time.time() - rt.started_at, 1),
        "backends": rt.pool.status(),
    }
    return JSONResponse(body, status_code=200 if ready else 503)
