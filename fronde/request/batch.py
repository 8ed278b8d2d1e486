"""A batch (``POST /fronde/v1/batch``): route a list of requests first, then run them by mode.

This is the seed's ``run_batch``: with swap residency a mode change costs a
llama-server restart, so a batch is routed up front (static class, cache, EMAs;
a request that would be probed goes to the probe's mode), grouped by mode, and
each group runs under one lease, so one swap per group at most. The group of a
mode that is already resident runs first. Results come back in input order.

The API checks each item (an OpenAI chat body with ``messages`` or a text-completion
body with ``prompt``; ``stream`` is ignored, always off) and hands over what it
checked, or the error it found for that item. Answer:
``{"object": "list", "data": [{"index", "status", "mode", "body"}, ...], "groups"}``
where ``body`` is the OpenAI response, or an OpenAI error body for that item.
"""

from __future__ import annotations

import time
from typing import TypedDict, cast

from fronde.backends.single import with_fields
from fronde.backends.swap_ports import Lease
from fronde.client_request import ClientRequest
from fronde.errors import FrondeError
from fronde.json_types import JSON
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.request.admission import Admission
from fronde.request.collect import answer_whole
from fronde.request.dispatcher import Dispatcher
from fronde.request.native import Kind, max_new_tokens
from fronde.request.sender import PATHS
from fronde.request.tools import honour_tool_choice
from fronde.router.cache import cache_key
from fronde.router.choice import forced_mode
from fronde.router.classify import constrained
from fronde.router.engine import Decision
from fronde.router.plan import Route
from fronde.timings import Timings

__all__ = ["MAX_BATCH", "BatchAnswer", "BatchItem", "BatchRow", "GroupRow", "run_batch"]

log = get_logger(__name__)

MAX_BATCH = 1024
"""Most requests in one batch."""

BatchItem = tuple[Kind, ClientRequest] | FrondeError
"""One checked item, ``(kind, request)``, or the error the API found in it."""

_Planned = dict[Mode, list[tuple[int, Kind, ClientRequest, Decision]]]


class BatchRow(TypedDict):
    """One item's answer.

    Its ``index`` in the input, HTTP ``status``, the ``mode`` it ran on (None when it did
    not run) and ``body`` (the OpenAI response, or its error body).
    """

    index: int
    status: int
    mode: str | None
    body: JSON


class GroupRow(TypedDict):
    """One mode's group: its ``mode``, how many ``requests`` and the ``seconds`` it took."""

    mode: str
    requests: int
    seconds: float


class BatchAnswer(TypedDict):
    """The batch's answer (module docstring): ``data`` in input order."""

    object: str
    data: list[BatchRow]
    groups: list[GroupRow]


def _item_error(index: int, exc: FrondeError) -> BatchRow:
    return {"index": index, "status": exc.status_code, "mode": None, "body": exc.to_body()}


async def _plan(d: Dispatcher, item: BatchItem, ready: list[Mode]) -> tuple[Kind, Decision]:
    """Plan one checked item.

    Raises:
        FrondeError: the item's own error, a refused ``tool_choice``, or no backend
            ready (503, as for a single request).
    """
    if isinstance(item, FrondeError):
        raise item
    kind, req = item
    if kind == "chat":
        await honour_tool_choice(req, d.tools.supports_tools)
    body = req.wire()
    forced = forced_mode(None, req.model)
    cls = d.classified(body, forced, ready)
    budget = max_new_tokens(body)
    held = constrained(body)
    return kind, d.router.plan(cls, cache_key(body), ready, forced, budget=budget, constrained=held)


async def run_batch(d: Dispatcher, items: list[BatchItem]) -> BatchAnswer:
    """Route every item, run them grouped by mode, and answer in input order.

    Args:
        d: the dispatcher (router, backends, swap scheduler).
        items: the checked items, in input order.

    Returns:
        The answer object described in the module docstring.
    """
    results: list[BatchRow | None] = [None] * len(items)
    planned: _Planned = {}
    ready = d.routable()
    for i, item in enumerate(items):
        try:
            kind, decision = await _plan(d, item, ready)
        except FrondeError as exc:
            results[i] = _item_error(i, exc)
            continue
        req = cast("tuple[Kind, ClientRequest]", item)[1]
        planned.setdefault(decision.plan.mode, []).append((i, kind, req, decision))
    resident = set(d.swap.resident) if d.swap is not None else set(d.pool.ready_modes())
    order = sorted(planned, key=lambda m: (m not in resident, min(i for i, *_ in planned[m])))
    try:
        groups = await _run_groups(d, order, planned, results)
    except BaseException:
        # The client left (or the server stops): what did not run is cancelled.
        for group in planned.values():
            for *_, decision in group:
                Admission(d.router, decision).finish("cancelled")
        raise
    log.info("batch.done", requests=len(items), groups=[g["mode"] for g in groups])
    # Every item has its row by now: refused when planned, else run or failed with its group.
    return {"object": "list", "data": [r for r in results if r is not None], "groups": groups}


async def _run_groups(
    d: Dispatcher, order: list[Mode], planned: _Planned, results: list[BatchRow | None]
) -> list[GroupRow]:
    """Run each mode's group under one lease, filling ``results``; return the groups' rows."""
    groups: list[GroupRow] = []
    for mode in order:
        t0 = time.monotonic()
        lease: Lease | None = None
        group = planned[mode]
        try:
            if d.swap is not None:
                # One lease, so one swap, per group; only baseline serves unsafe-for-spec.
                unsafe = any(dec.plan.route is Route.UNSAFE for *_, dec in group)
                lease = await d.swap.acquire(mode, fallback=not unsafe)
            use = lease.mode if lease is not None else mode
            for i, kind, req, decision in group:
                results[i] = await _run_one(d, i, kind, req, decision, use)
        except FrondeError as exc:
            for i, _, _, decision in group:
                if results[i] is None:
                    results[i] = _item_error(i, exc)
                    Admission(d.router, decision).finish("error", exc.message)
        finally:
            if lease is not None and d.swap is not None:
                d.swap.release(lease)
        groups.append(
            {"mode": str(mode), "requests": len(group), "seconds": round(time.monotonic() - t0, 3)}
        )
    return groups


async def _run_one(
    d: Dispatcher, index: int, kind: Kind, req: ClientRequest, decision: Decision, mode: Mode
) -> BatchRow:
    """One item on ``mode`` (non-streamed), behind the decode gate."""
    adm = Admission(d.router, decision)
    await adm.take_slot()
    try:
        decision.winner = mode if mode is not decision.plan.mode else None
        url = d.pool.get(mode).url
        sent = with_fields(req.wire(), d.pool.fields(mode))  # the mode, on a server of every mode
        with adm.generating(mode):
            held = d.sender.held_stop  # the stop strings' one rule, as a single request's
            data = await answer_whole(d.client, url, PATHS[kind], sent, str(mode), held=held)
    except FrondeError as exc:
        adm.close("error", exc.message)
        return _item_error(index, exc)
    finally:
        adm.release()
    d.router.record(decision, mode, Timings.parse(data.get("timings")))
    d.router.settle_whole_probe(decision, mode)
    adm.finish("done")
    return {"index": index, "status": 200, "mode": str(mode), "body": data}
