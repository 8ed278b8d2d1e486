"""``POST /fronde/v1/batch``: route a list of requests first, then run them grouped by mode.

This is the seed's ``run_batch``: with swap residency a mode change costs a
llama-server restart, so a batch is routed up front (static class, cache, EMAs;
a request that would be probed goes to the probe's mode), grouped by mode, and
each group runs under one lease, so one swap per group at most. The group of a
mode that is already resident runs first. Results come back in input order.

Body: ``{"requests": [REQUEST, ...]}``, each an OpenAI chat body (``messages``) or
text-completion body (``prompt``); ``stream`` is ignored (always off). Answer:
``{"object": "list", "data": [{"index", "status", "mode", "body"}, ...], "groups"}``
where ``body`` is the OpenAI response, or an OpenAI error body for that item.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fronde.api.collect import answer_whole
from fronde.api.deps import Runtime, RuntimeDep
from fronde.api.relay import until_disconnect
from fronde.api.schema import check_chat, check_completion, read_json_body
from fronde.api.tools import honour_tool_choice
from fronde.backends.swap import Lease
from fronde.errors import FrondeError, InvalidRequestError
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.router.cache import cache_key
from fronde.router.choice import forced_mode
from fronde.router.classify import classify
from fronde.router.engine import Decision, GateHold
from fronde.router.policy import Route

__all__ = ["MAX_BATCH", "batch", "run_batch"]

log = get_logger(__name__)
batch = APIRouter()

MAX_BATCH = 1024
"""Most requests in one batch."""

PATHS = {"chat": "/v1/chat/completions", "text": "/v1/completions"}


def _item_error(index: int, exc: FrondeError) -> dict[str, Any]:
    return {"index": index, "status": exc.status_code, "mode": None, "body": exc.to_body()}


async def run_batch(rt: Runtime, items: list[Any]) -> dict[str, Any]:
    """Route every item, run them grouped by mode, and answer in input order.

    Args:
        rt: the app's runtime.
        items: OpenAI request bodies.

    Returns:
        The answer object described in the module docstring.
    """
    results: list[dict[str, Any] | None] = [None] * len(items)
    planned: dict[Mode, list[tuple[int, str, dict[str, Any], Decision]]] = {}
    ready = rt.routable()
    for i, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise InvalidRequestError(f"requests[{i}] is not a JSON object")
            body: dict[str, Any] = {**item, "stream": False}  # pyright: ignore[reportUnknownArgumentType]
            kind = "chat" if "messages" in body else "text"
            check = check_chat if kind == "chat" else check_completion
            check(body, rt.settings.server.default_max_tokens)
            if kind == "chat":
                await honour_tool_choice(rt, body)
            forced = forced_mode(None, body.get("model"))
            if not ready and forced is None:
                raise InvalidRequestError("no backend is ready yet")
            cls = classify(body, edit_block_chars=rt.settings.router.edit_block_chars)
            decision = rt.router.plan(cls, cache_key(body), ready, forced)
        except FrondeError as exc:
            results[i] = _item_error(i, exc)
            continue
        planned.setdefault(decision.plan.mode, []).append((i, kind, body, decision))
    resident = set(rt.swap.resident) if rt.swap is not None else set(rt.pool.ready_modes())
    order = sorted(planned, key=lambda m: (m not in resident, min(i for i, *_ in planned[m])))
    try:
        groups = await _run_groups(rt, order, planned, results)
    except BaseException:
        # The client left (or the server stops): what did not run is cancelled.
        for group in planned.values():
            for *_, decision in group:
                rt.router.finish(decision, "cancelled")
        raise
    log.info("batch.done", requests=len(items), groups=[g["mode"] for g in groups])
    return {"object": "list", "data": results, "groups": groups}


async def _run_groups(
    rt: Runtime,
    order: list[Mode],
    planned: dict[Mode, list[tuple[int, str, dict[str, Any], Decision]]],
    results: list[dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """Run each mode's group under one lease, filling ``results``; return the groups' rows."""
    groups: list[dict[str, Any]] = []
    for mode in order:
        t0 = time.monotonic()
        lease: Lease | None = None
        group = planned[mode]
        try:
            if rt.swap is not None:
                # One lease, so one swap, per group; only baseline serves unsafe-for-spec.
                unsafe = any(d.plan.route is Route.UNSAFE for *_, d in group)
                lease = await rt.swap.acquire(mode, fallback=not unsafe)
            use = lease.mode if lease is not None else mode
            for i, kind, body, decision in group:
                results[i] = await _run_one(rt, i, kind, body, decision, use)
        except FrondeError as exc:
            for i, _, _, decision in group:
                if results[i] is None:
                    results[i] = _item_error(i, exc)
                    rt.router.finish(decision, "error", exc.message)
        finally:
            if lease is not None and rt.swap is not None:
                rt.swap.release(lease)
        groups.append(
            {"mode": str(mode), "requests": len(group), "seconds": round(time.monotonic() - t0, 3)}
        )
    return groups


async def _run_one(
    rt: Runtime, index: int, kind: str, body: dict[str, Any], decision: Decision, mode: Mode
) -> dict[str, Any]:
    """One item on ``mode`` (non-streamed), behind the decode gate."""
    hold = GateHold(rt.router.gate)
    t_wait = time.monotonic()
    await hold.acquire()
    rt.router.begin(decision, (time.monotonic() - t_wait) * 1000)
    try:
        decision.winner = mode if mode is not decision.plan.mode else None
        url = rt.pool.get(mode).url
        data = await answer_whole(rt.client, url, PATHS[kind], body, str(mode))
    except FrondeError as exc:
        rt.router.finish(decision, "error", exc.message)
        return _item_error(index, exc)
    finally:
        hold.release()
    rt.router.record(decision, mode, data.get("timings"))
    rt.router.settle_whole_probe(decision, mode)
    rt.router.finish(decision, "done")
    return {"index": index, "status": 200, "mode": str(mode), "body": data}


@batch.post("/fronde/v1/batch")
async def post_batch(request: Request, rt: RuntimeDep) -> Response:
    """Run a batch (see the module docstring); a client that leaves cancels what is left.

    Raises:
        InvalidRequestError: the body has no ``requests`` list, or more than
            :data:`MAX_BATCH` items (HTTP 400). Errors of single items are answered
            in their own result.
    """
    body = await read_json_body(request, rt.settings.server.max_body_bytes)
    items = body.get("requests")
    if not isinstance(items, list):
        raise InvalidRequestError("the body needs a list `requests`", param="requests")
    if len(items) > MAX_BATCH:  # pyright: ignore[reportUnknownArgumentType]
        raise InvalidRequestError(f"at most {MAX_BATCH} requests per batch", param="requests")
    return await until_disconnect(request.receive, _answer(rt, items))  # pyright: ignore[reportUnknownArgumentType]


async def _answer(rt: Runtime, items: list[Any]) -> Response:
    return JSONResponse(await run_batch(rt, items))
