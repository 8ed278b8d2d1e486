"""How a block sends its items: each once, or closed-loop clients over a timed window.

:func:`send_each` sends every item once, at most ``c`` in flight, a new connection per
request. :func:`timed_pass` runs ``c`` clients in a closed loop over keep-alive
connections (as agent tools keep theirs) for a warm-up and a window, counting every
answer's text events before, in and after it. With ``pin`` client k names slot k
(``id_slot``; b11434 ``server-context.cpp``: a request that names a slot gets it).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import httpx

from fronde.bench.arms import Target
from fronde.bench.timed_client import Sample, send
from fronde.bench.workloads import Form, Item, Workload
from fronde.errors import FrondeError

__all__ = [
    "HISTORY_TOKENS", "SampleHead", "Timed", "history_item", "keepalive_http", "request_sample",
    "sample_head", "send_each", "timed_pass", "window_counts",
]  # fmt: skip

Emit = Callable[[dict[str, Any]], None]
"""Takes one sample record."""

Progress = Callable[[str, int], None]
"""As :data:`fronde.bench.protocol.Progress`: a line (or "") and requests that ended."""

HISTORY_TOKENS = 8
"""Tokens of each request that gives a server its slot history (``Timed.history``)."""

KEEPALIVE_S = 4.0
"""How long an idle pooled connection is kept, s: under llama-server's and uvicorn's 5 s
(cpp-httplib ``CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND``), so the client drops it first."""


@dataclass(frozen=True)
class Timed:
    """A timed block: closed-loop clients, ``warmup_s`` s not counted, then ``window_s`` s.

    ``history``: short requests sent at once before the clock starts, one per slot (0:
    fresh servers). ``once``: each item at most once; when they run out first, the
    window ends at the last request sent.
    """

    warmup_s: float
    window_s: float
    history: int = 0
    once: bool = False


SampleHead = TypedDict(
    "SampleHead",
    {
        "item": str,
        "domain": str,
        "order": int,
        "level": str,
        "t0": float,
        "client": NotRequired[int],
        "pass": NotRequired[int],
    },
)
"""A sample record's head: item, domain, place in the send order, level tag, ``t0`` (s
since the block's first request); a timed block's also ``client`` and ``pass`` (a
keyword, hence the functional syntax)."""


def sample_head(item: Item, order: int, level: str, t_start: float) -> SampleHead:
    """A sample's item, domain, order, level tag and start (s since ``t_start``)."""
    t0 = round(time.perf_counter() - t_start, 4)
    return SampleHead(item=item.id, domain=item.domain, order=order, level=level, t0=t0)


async def request_sample(
    http: httpx.AsyncClient, target: Target, form: Form, body: dict[str, Any], head: SampleHead
) -> dict[str, Any]:
    """Send one request body; its sample record (``ok`` False with the error on a failure)."""
    try:
        with target.server() as url:
            sample = await send(http, url, form, body, target.headers)
        return {**head, "ok": True, **sample.record()}
    except (FrondeError, httpx.HTTPError) as exc:
        return {**head, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500]}


def item_body(
    target: Target, item: Item, form: Form, max_tokens: int, stream: bool = True
) -> dict[str, Any]:
    """``item``'s body for ``target``, streamed with usage or not streamed at all."""
    body = target.body(item, form, max_tokens) | {"stream": stream}
    if not stream:
        body.pop("stream_options", None)
    return body


async def send_each(
    http: httpx.AsyncClient,
    target: Target,
    form: Form,
    max_tokens: int,
    workload: Workload,
    c: int,
    level: tuple[str, float, bool],
    emit: Emit,
    progress: Progress,
) -> None:
    """Send every item once, at most ``c`` in flight; ``level``: (tag, gap_s, stream)."""
    tag, gap_s, stream = level
    gate = asyncio.Semaphore(c)
    t_start = time.perf_counter()

    async def one(order: int, item: Item) -> None:
        head = sample_head(item, order, tag, t_start)
        try:
            body = item_body(target, item, form, max_tokens, stream)
            emit(await request_sample(http, target, form, body, head))
        finally:
            gate.release()
        progress("", 1)

    tasks: list[asyncio.Task[None]] = []
    for order, item in enumerate(workload.items):
        await gate.acquire()
        tasks.append(asyncio.create_task(one(order, item)))
        if gap_s:
            await asyncio.sleep(gap_s)
    await asyncio.gather(*tasks)


def keepalive_http(connections: int) -> httpx.AsyncClient:
    """An HTTP client keeping up to ``connections`` idle connections, :data:`KEEPALIVE_S` each."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(900.0, connect=10.0),
        limits=httpx.Limits(
            max_connections=None,
            max_keepalive_connections=max(1, connections),
            keepalive_expiry=KEEPALIVE_S,
        ),
    )


def history_item(k: int) -> Item:
    """The ``k``-th short request that gives a server slot history (no workload's prompt)."""
    text = f"Say hello to visitor number {k}."
    return Item(f"history-{k}", "history", text, ({"role": "user", "content": text},))


def window_counts(arrivals: list[float], lo: float, hi: float) -> list[int]:
    """Text events that arrived before ``lo``, in [lo, hi] and after ``hi`` (perf_counter s)."""
    before = sum(t < lo for t in arrivals)
    after = sum(t > hi for t in arrivals)
    return [before, len(arrivals) - before - after, after]


async def _sent(
    http: httpx.AsyncClient, target: Target, form: Form, body: dict[str, Any], box: list[Sample]
) -> Sample:
    """One streamed request into ``box[-1]`` (a caller that cancels it keeps what came).

    A server may close an idle connection just as the pool reuses it ("Server
    disconnected without sending a response"): then it is sent once again.
    """
    for attempt in (0, 1):
        box.append(Sample(sent=time.perf_counter()))
        try:
            with target.server() as url:
                return await send(http, url, form, body, target.headers, box[-1])
        except httpx.RemoteProtocolError as exc:
            if attempt or "without sending a response" not in str(exc):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


async def timed_pass(
    target: Target,
    form: Form,
    max_tokens: int,
    workload: Workload,
    c: int,
    timed: Timed,
    *,
    level: str,
    pin: bool,
    emit: Emit,
) -> None:
    """``c`` closed-loop clients over ``workload`` for ``timed``'s warm-up and window.

    Client k sends the next item (n over all clients; ``pass`` = n ÷ the items) as soon
    as its last answer ended; answers still streaming at the close are cancelled,
    recorded with ``cut_off``. Records carry ``win`` (the window, ``t0`` clock, s),
    ``ev`` (text events before, in and after it) and ``cut`` when the items ran out
    first; they are emitted when the block ends.

    Raises:
        FrondeError: a history request failed (the block is not measured).
        httpx.HTTPError: likewise.
    """
    items = workload.items
    if not items:
        return
    got: list[tuple[SampleHead, Sample | None, str]] = []
    async with keepalive_http(max(c, timed.history)) as http:
        if timed.history:
            bodies = [
                item_body(target, history_item(k), form, HISTORY_TOKENS)
                for k in range(timed.history)
            ]
            await asyncio.gather(*(_sent(http, target, form, b, []) for b in bodies))
        t_start = time.perf_counter()
        lo = t_start + timed.warmup_s
        hi = lo + timed.window_s
        cursor = itertools.count()

        async def client(k: int) -> None:
            while time.perf_counter() < hi:
                n = next(cursor)
                if timed.once and n >= len(items):
                    return
                item = items[n % len(items)]
                head = sample_head(item, n, level, t_start)
                head["client"], head["pass"] = k, n // len(items)
                body = item_body(target, item, form, max_tokens)
                body |= {"id_slot": k} if pin else {}
                box: list[Sample] = []
                try:
                    got.append((head, await _sent(http, target, form, body, box), ""))
                except (FrondeError, httpx.HTTPError) as exc:
                    got.append((head, None, f"{type(exc).__name__}: {exc}"[:500]))
                except asyncio.CancelledError:
                    if box:  # the window closed on it: what arrived counts
                        got.append((head, box[-1], "cut off"))
                    raise

        tasks = [asyncio.create_task(client(k)) for k in range(c)]
        await asyncio.wait(tasks, timeout=max(0.0, hi - time.perf_counter()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    _emit_timed(got, t_start, lo, hi, timed.once, emit)


def _emit_timed(
    got: list[tuple[SampleHead, Sample | None, str]],
    t_start: float,
    lo: float,
    hi: float,
    once: bool,
    emit: Emit,
) -> None:
    """The records of a timed block, in send order (:func:`timed_pass`)."""
    end, cut = hi, False
    last = max((t_start + h["t0"] for h, _, _ in got), default=hi)
    if once and last < hi:
        end, cut = max(last, lo), True
    win = [round(lo - t_start, 4), round(end - t_start, 4)]
    for head, sample, error in sorted(got, key=lambda g: g[0]["t0"]):
        if sample is None:
            emit({**head, "ok": False, "error": error, "win": win})
            continue
        if error:  # cut off at the close: no usage came, each text event is a token
            # The cancel lands a few ms after the close (more on a loaded machine): the
            # events in between belong to no window and are dropped with the rest.
            sample.arrivals = [a for a in sample.arrivals if a <= end]
            sample.pieces = sample.tokens = len(sample.arrivals)
        extra: dict[str, Any] = {"win": win, "ev": window_counts(sample.arrivals, lo, end)}
        if error:
            extra["cut_off"] = True
        emit({**head, "ok": True, **sample.record(), **extra} | ({"cut": True} if cut else {}))
