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
from typing import Any, cast

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from fronde.api.collect import answer_whole
from fronde.api.deps import RuntimeDep
from fronde.api.relay import (
    DONE_LINE,
    OwnedStops,
    RelayResponse,
    relay_sse,
    sse_error_event,
    until_disconnect,
    with_keepalive,
)
from fronde.api.schema import check_chat, check_completion, read_json_body
from fronde.api.tools import honour_tool_choice
from fronde.errors import (
    BackendConnectionError,
    BackendUnavailableError,
    ContextLengthError,
    FrondeError,
)
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.router.cache import cache_key
from fronde.router.choice import MODEL_PREFIX, forced_mode
from fronde.router.classify import RequestClass, classify
from fronde.router.engine import Decision, GateHold, Status
from fronde.router.native import Kind, chunk, finish_reason, full_response, new_id, usage
from fronde.router.policy import Route
from fronde.router.probe import Splice

__all__ = ["router"]

router = APIRouter()
log = get_logger(__name__)

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
PATHS: dict[Kind, str] = {"chat": CHAT_PATH, "text": COMPLETIONS_PATH}
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
DONE_BYTES = DONE_LINE.encode()


async def _forward(request: Request, rt: RuntimeDep, kind: Kind, body: dict[str, Any]) -> Response:
    t0 = time.monotonic()
    forced = forced_mode(request.headers.get("x-fronde-mode"), body.get("model"))
    cls = classify(body, edit_block_chars=rt.settings.router.edit_block_chars)
    ready = rt.routable()
    if not ready and forced is None:
        raise BackendUnavailableError("no backend is ready yet")
    if cls is RequestClass.UNSAFE and forced is None and Mode.BASELINE not in rt.pool.backends:
        raise BackendUnavailableError(
            "requests with tools, a grammar, a JSON schema, response_format or logprobs run "
            "on the baseline mode only (speculation is not proven safe for them), and this "
            "server runs no baseline: start it with --mode baseline"
        )
    key = cache_key(body)
    if rt.router.shared is not None and forced is None:
        await rt.router.shared.lookup_route(key)  # another replica may have routed it
    decision = rt.router.plan(cls, key, ready, forced, now=t0)
    plan = decision.plan
    headers = {
        "x-fronde-mode": str(plan.mode),
        "x-fronde-class": str(plan.route),
        "x-fronde-request-id": decision.rid,  # its row in /fronde/v1/router's "recent"
    }
    hold = GateHold(rt.router.gate)
    t_wait = time.monotonic()
    try:
        mode = await _resident(rt, decision, headers, hold)
        await hold.acquire()
        rt.router.begin(decision, (time.monotonic() - t_wait) * 1000)
        try:
            # A probe hands over between two backends; with swap residency only the
            # leased one is sure to stay up, so the probed mode answers in full.
            if plan.route is Route.PROBE and _probe_eligible(kind, body) and rt.swap is None:
                response = await _probe(rt, decision, kind, body, headers, hold)
            else:
                response = await _send(rt, PATHS[kind], body, decision, mode, headers, hold)
        except (BackendConnectionError, BackendUnavailableError) as exc:
            # Nothing reached the client yet: serve from another ready mode.
            alt = _retry_mode(rt, decision)
            if alt is None:
                raise
            log.warning("route.retried", failed=str(plan.mode), mode=str(alt), error=exc.message)
            headers |= {"x-fronde-mode": str(alt), "x-fronde-retried-from": str(plan.mode)}
            decision.winner = alt
            response = await _send(rt, PATHS[kind], body, decision, alt, headers, hold)
    except FrondeError as exc:
        hold.release()
        rt.router.finish(decision, "error", exc.message)
        exc.headers.update(headers)  # an error still says which mode was chosen
        if isinstance(exc, ContextLengthError):
            exc.param = "messages" if kind == "chat" else "prompt"
        raise
    except BaseException:
        hold.release()
        rt.router.finish(decision, "cancelled")
        raise
    if not isinstance(response, StreamingResponse):
        hold.release()  # a stream releases when it ends
        rt.router.finish(decision, "done")
    return response


def _overhead(decision: Decision, headers: dict[str, str]) -> None:
    """Fronde's own time before the upstream call: since arrival, waits excluded, ms.

    Set on the decision and in the ``x-fronde-overhead-ms`` response header.
    """
    spent_ms = (time.monotonic() - decision.started) * 1000
    decision.overhead_ms = round(spent_ms - (decision.queued_ms or 0.0), 3)
    headers["x-fronde-overhead-ms"] = f"{decision.overhead_ms:.3f}"


async def _tracked(
    rt: RuntimeDep, decision: Decision, source: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """Relay an SSE byte stream, counting its events and ending ``decision`` with it.

    The outcome is ``done`` when ``[DONE]`` went out, ``error`` when the stream
    ended without it (an in-band error event), ``cancelled`` when the client left.
    """
    outcome: Status = "error"
    try:
        async for piece in source:
            if piece.startswith(b"data: {"):
                rt.router.progress(decision)
            elif piece.startswith(DONE_BYTES):
                outcome = "done"
            yield piece
    except BaseException:
        outcome = "cancelled"
        raise
    finally:
        rt.router.finish(decision, outcome, None if outcome != "error" else "error in the stream")


async def _resident(
    rt: RuntimeDep, decision: Decision, headers: dict[str, str], hold: GateHold
) -> Mode:
    """With swap residency, wait for the plan's mode to be resident; return the mode to use.

    The lease goes back when ``hold`` is released. Past ``swap.max_wait_s`` the
    scheduler grants another resident mode (``x-fronde-swap-fallback`` names the
    one asked for) or raises :class:`~fronde.backends.swap.SwapWaitError` (503).
    """
    plan = decision.plan
    if rt.swap is None:
        return plan.mode
    swap = rt.swap
    # Only baseline may serve unsafe-for-spec requests: past the wait bound, a 503.
    lease = await swap.acquire(plan.mode, fallback=plan.route is not Route.UNSAFE)
    hold.also(lambda: swap.release(lease))
    headers["x-fronde-swap-wait-ms"] = f"{lease.waited_s * 1000:.0f}"
    if lease.fallback:
        headers |= {"x-fronde-mode": str(lease.mode), "x-fronde-swap-fallback": str(plan.mode)}
        decision.winner = lease.mode
    return lease.mode


def _retry_mode(rt: RuntimeDep, decision: Decision) -> Mode | None:
    """Where a request goes when its mode failed before any byte was sent, or None.

    Forced requests are not moved (the client asked for that mode), nor are
    unsafe-for-spec ones (only baseline may serve them), nor requests under swap
    residency (only the leased mode is sure to stay up). Otherwise the plan's floor,
    then baseline, then any other ready mode.
    """
    plan = decision.plan
    if plan.route in (Route.FORCED, Route.UNSAFE) or rt.swap is not None:
        return None
    ready = [m for m in rt.pool.ready_modes() if m is not plan.mode]
    for m in (plan.floor, Mode.BASELINE, *ready):
        if m is not None and m in ready:
            return m
    return None


def _probe_eligible(kind: Kind, body: dict[str, Any]) -> bool:
    """The probe path renders and tokenizes the prompt: it needs a string prompt."""
    return kind == "chat" or isinstance(body.get("prompt"), str)


async def _send(
    rt: RuntimeDep,
    path: str,
    body: dict[str, Any],
    decision: Decision,
    mode: Mode,
    headers: dict[str, str],
    hold: GateHold,
) -> Response:
    """Pass the request through to ``mode``'s OpenAI endpoint, recording its timings."""
    backend = rt.pool.get(mode)
    router = rt.router
    _overhead(decision, headers)

    def on_timings(timings: dict[str, Any]) -> None:
        router.record(decision, mode, timings)
        router.settle_whole_probe(decision, mode)

    if not body.get("stream", False):
        # Streamed upstream all the same (fronde.api.collect): cancellable.
        router.in_flight[mode] += 1
        try:
            data = await answer_whole(rt.client, backend.url, path, body, str(mode), on_timings)
        finally:
            router.in_flight[mode] -= 1
        return JSONResponse(data, headers=headers)
    stack = AsyncExitStack()
    stack.callback(hold.release)
    router.in_flight[mode] += 1
    stack.callback(lambda: router.in_flight.subtract([mode]))
    # Stop strings in a stream are Fronde's (see fronde.api.relay): llama-server
    # would drop the text it held back for a partial match at the budget.
    upstream, stops = OwnedStops.take(body, chat=path == CHAT_PATH)
    # Open the upstream before answering: a failure before the first byte is
    # still an ordinary HTTP error (raised here), not a broken 200 stream.
    try:
        resp = await stack.enter_async_context(rt.client.stream(backend.url, path, upstream))
    except BaseException:
        await stack.aclose()
        raise

    relayed = relay_sse(
        resp, str(mode), on_timings, include_usage=_include_usage(body), stops=stops
    )

    async def events() -> AsyncIterator[bytes]:
        try:
            tracked = _tracked(rt, decision, relayed)
            async for chunk in with_keepalive(tracked, rt.settings.server.sse_keepalive_s):
                yield chunk
        finally:
            # Also runs when the client disconnects (we are cancelled): the upstream
            # connection closes and llama-server frees the slot. Shielded, since
            # any await in a cancelled scope would be cancelled at once.
            with anyio.CancelScope(shield=True):
                await stack.aclose()

    return RelayResponse(
        events(),
        media_type="text/event-stream",
        headers=headers | SSE_HEADERS,
        background=BackgroundTask(stack.aclose),
    )


async def _probe(
    rt: RuntimeDep,
    decision: Decision,
    kind: Kind,
    body: dict[str, Any],
    headers: dict[str, str],
    hold: GateHold,
) -> Response:
    """Probe-and-continue (see :mod:`fronde.router.probe`), answered in OpenAI's shape.

    The probe segment runs before the answer starts, so a refusal (a prompt over
    the context: 400 ``context_length_exceeded``) or a failed backend is still a
    plain HTTP error, streamed or not.
    """
    stream = bool(body.get("stream", False))
    splice = Splice(rt.client, rt.pool, rt.router, decision, kind, body, stream=stream)
    await splice.prepare()  # render + tokenize: errors here are still plain HTTP errors
    _overhead(decision, headers)  # the probe's render + tokenize round trips count
    await splice.start()
    model = str(body.get("model") or rt.settings.public_model)
    if not stream:
        text = "".join([piece async for piece in splice.run()])
        extra = {"timings": splice.final_timings(), "fronde": splice.fronde_info()}
        data = full_response(
            kind,
            model,
            text,
            finish_reason(splice.finish_stop_type),
            len(splice.prompt),
            splice.completion_tokens,
            extra,
        )
        headers = headers | {"x-fronde-mode": str(decision.winner or decision.plan.mode)}
        if decision.probe_tok_s is not None:
            headers["x-fronde-probe-tok-s"] = f"{decision.probe_tok_s:.2f}"
        return JSONResponse(data, headers=headers)

    rid, created = new_id(kind), int(time.time())
    include_usage = _include_usage(body)

    def sse(obj: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"

    async def events() -> AsyncIterator[bytes]:
        first = True
        try:
            async for piece in splice.run():
                yield sse(chunk(kind, rid, model, created, text=piece, role=first))
                first = False
        except FrondeError as exc:
            yield b"\n" + sse_error_event(exc.message)
            return
        finally:
            hold.release()
        last = chunk(
            kind,
            rid,
            model,
            created,
            text="" if kind == "text" else None,
            role=first,
            finish=finish_reason(splice.finish_stop_type),
        )
        last["timings"] = splice.final_timings()
        last["fronde"] = splice.fronde_info()
        yield sse(last)
        if include_usage:
            usage_chunk = chunk(kind, rid, model, created)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = usage(len(splice.prompt), splice.completion_tokens)
            yield sse(usage_chunk)
        yield DONE_LINE.encode() + b"\n\n"

    return RelayResponse(
        with_keepalive(_tracked(rt, decision, events()), rt.settings.server.sse_keepalive_s),
        media_type="text/event-stream",
        headers=headers | SSE_HEADERS,
        background=BackgroundTask(hold.release),
    )


def _include_usage(body: dict[str, Any]) -> bool:
    """The client's ``stream_options.include_usage``."""
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(cast("dict[str, Any]", options).get("include_usage"))


@router.post(CHAT_PATH)
async def chat_completions(request: Request, rt: RuntimeDep) -> Response:
    """OpenAI ``POST /v1/chat/completions``, streamed or not."""
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    check_chat(body, rt.settings.server.default_max_tokens)
    await honour_tool_choice(rt, body)
    return await until_disconnect(request.receive, _forward(request, rt, "chat", body))


@router.post(COMPLETIONS_PATH)
async def completions(request: Request, rt: RuntimeDep) -> Response:
    """OpenAI ``POST /v1/completions`` (legacy text completions), streamed or not."""
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    check_completion(body, rt.settings.server.default_max_tokens)
    return await until_disconnect(request.receive, _forward(request, rt, "text", body))


@router.api_route("/v1/models", methods=["GET", "HEAD"])
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
    ready = rt.pool.ready_modes()
    if rt.swap is not None:  # whatever is resident serves (and swaps bring the rest)
        floor_ready = bool(ready)
    else:
        floor_ready = Mode.BASELINE in ready if Mode.BASELINE in rt.pool.backends else bool(ready)
    body = {
        "status": "ok" if floor_ready else "unavailable",
        "uptime_s": round(time.time() - rt.started_at, 1),
        "residency": rt.settings.residency,
        "backends": rt.pool.status(),
    }
    return JSONResponse(body, status_code=200 if floor_ready else 503)


@router.get("/fronde/v1/router")
async def router_state(rt: RuntimeDep) -> dict[str, Any]:
    """The router's live state: EMAs, α/τ per mode, quarantines, cache, recent decisions.

    With swap residency, ``swap`` holds the resident modes, queues and swaps.
    """
    state = rt.router.snapshot()
    state["swap"] = rt.swap.snapshot() if rt.swap is not None else None
    return state
