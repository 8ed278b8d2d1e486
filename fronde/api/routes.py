"""The OpenAI-compatible routes: chat and text completions, models, health, batches.

Routes stay thin: read and check the body (:mod:`fronde.api.schema`), hand it to the
dispatcher (:mod:`fronde.request`), render its answer. The decision travels in the
``x-fronde-mode`` and ``x-fronde-class`` headers of every response.
"""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fronde.api.asgi import answered, until_disconnect
from fronde.api.deps import RuntimeDep, runtime_of
from fronde.api.hot import Endpoint
from fronde.api.schema import check_chat, check_completion, read_json_body
from fronde.client_request import ChatRequest, CompletionRequest
from fronde.errors import FrondeError, InvalidRequestError
from fronde.json_types import JSON, JSONObject
from fronde.request import MAX_BATCH, PATHS, BatchItem, run_batch
from fronde.request.prompts import check_prompt
from fronde.stamps import stamp

__all__ = ["HOT_ROUTES", "router"]

router = APIRouter()


async def chat_completions(request: Request) -> Response:
    """OpenAI ``POST /v1/chat/completions``, streamed or not."""
    rt = runtime_of(request)
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    check_chat(body, rt.settings.server.default_max_tokens)
    chat = ChatRequest.parse(body)
    stamp("parsed")
    work = rt.dispatcher.answer("chat", chat, request.headers.get("x-fronde-mode"))
    return await answered(request.receive, work)


async def completions(request: Request) -> Response:
    """OpenAI ``POST /v1/completions`` (legacy text completions), streamed or not.

    A ``prompt`` list of several prompts gets one choice per prompt, routed as one
    request (:mod:`fronde.request.prompts`).
    """
    rt = runtime_of(request)
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    check_completion(body, rt.settings.server.default_max_tokens)
    check_prompt(body)
    text = CompletionRequest.parse(body)
    stamp("parsed")
    work = rt.dispatcher.answer("text", text, request.headers.get("x-fronde-mode"))
    return await answered(request.receive, work)


HOT_ROUTES: dict[str, Endpoint] = {PATHS["chat"]: chat_completions, PATHS["text"]: completions}
"""The routes most requests take, by path: registered on :data:`router` for ``POST`` from
here, and called without FastAPI's routing layers by :class:`~fronde.api.hot.HotRoutes`."""

for _path, _endpoint in HOT_ROUTES.items():
    router.add_api_route(_path, _endpoint, methods=["POST"])


@router.api_route("/v1/models", methods=["GET", "HEAD"])
async def list_models(rt: RuntimeDep) -> dict[str, Any]:
    """OpenAI ``GET /v1/models``: ``fronde`` (routed) and ``fronde:<mode>`` per mode.

    Modes left out of this pool are listed under ``unavailable`` with the reason,
    outside ``data`` so that tools offering a model picker do not offer them.
    """
    return rt.models()


@router.api_route("/health/live", methods=["GET", "HEAD"])
async def live() -> dict[str, str]:
    """Liveness: the proxy answers, whatever its backends do.

    For Kubernetes' liveness probe; readiness is ``/health``, which is 503 while no
    floor backend is ready (a loading 8B model must not get Fronde restarted).
    """
    return {"status": "ok"}


@router.api_route("/health", methods=["GET", "HEAD"])
async def health(rt: RuntimeDep) -> JSONResponse:
    """Proxy and backend states: 200 once the floor of last resort can serve, else 503.

    That is baseline when it runs, otherwise any mode.
    """
    ok, body = rt.health()
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/fronde/v1/router")
async def router_state(rt: RuntimeDep) -> dict[str, Any]:
    """The router's live state: EMAs, α/τ per mode, quarantines, cache, recent decisions.

    With swap residency, ``swap`` holds the resident modes, queues and swaps.
    """
    return rt.state()


def _checked(index: int, item: JSON, default_max_tokens: int) -> BatchItem:
    """One batch item checked like a single request: (kind, request), or its error."""
    try:
        if not isinstance(item, dict):
            raise InvalidRequestError(f"requests[{index}] is not a JSON object")
        body: JSONObject = {**cast("JSONObject", item), "stream": False}
        if "messages" in body:
            check_chat(body, default_max_tokens)
            return "chat", ChatRequest.parse(body)
        check_completion(body, default_max_tokens)
        check_prompt(body)
        return "text", CompletionRequest.parse(body)
    except FrondeError as exc:
        return exc


@router.post("/fronde/v1/batch")
async def post_batch(request: Request, rt: RuntimeDep) -> Response:
    """Route a list of requests first, then run them grouped by mode.

    See :mod:`fronde.request.batch`; a client that leaves cancels what is left.

    Body: ``{"requests": [REQUEST, ...]}``, each an OpenAI chat body (``messages``) or
    text-completion body (``prompt``); ``stream`` is ignored (always off).

    Raises:
        InvalidRequestError: the body has no ``requests`` list, or more than
            :data:`~fronde.request.batch.MAX_BATCH` items (HTTP 400). Errors of single
            items are answered in their own result.
    """
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    items = body.get("requests")
    if not isinstance(items, list):
        raise InvalidRequestError("the body needs a list `requests`", param="requests")
    listed: list[JSON] = items
    if len(listed) > MAX_BATCH:
        raise InvalidRequestError(f"at most {MAX_BATCH} requests per batch", param="requests")
    limit = rt.settings.server.default_max_tokens
    checked = [_checked(i, item, limit) for i, item in enumerate(listed)]

    async def run() -> Response:
        return JSONResponse(await run_batch(rt.dispatcher, checked))

    return await until_disconnect(request.receive, run())
