# pyright: reportUnknownMemberType=false
"""A load run's figures per (arm, c): tok/s as a user receives it, latency, what looped.

**Counting** (:func:`load_rows`). A cell's tok/s is every streamed token that arrived
inside the block's window ÷ the window: an answer's tokens (``usage.completion_tokens``,
else llama-server's ``timings.predicted_n``, else its text events) spread evenly over
its text events, the share whose events arrived in the window counted
(:func:`~fronde.bench.passes.timed_pass` records each answer's events before, in and
after the window; an answer still streaming when the window closes is cut off there,
its text events counted one token each). A looping answer stays in the numerator: its
tokens reached the user, and its time is in the window anyway. It is reported apart
instead
(:attr:`LoadRow.loop_share`, :attr:`LoadRow.tok_s_noloop`). The rule of older records,
which carry no arrival counts, is kept for their pages (``spread``): each request's
tokens spread evenly from its first token to its end, the part inside the steady window
(first request sent → last one sent) counted, every token included.

On the H200 (2026-12-05, gemma, c = 1) the rule before this one left the 23 items that
looped in some arm out of the numerator while their requests still filled the window:
the plain server read 314 tok/s where every token counted reads 629–644 (an outside
client's check).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Literal

import numpy as np

from fronde.bench.verdict import LOOP_SCORE
from fronde.timings import Timings

__all__ = [
    "SERVER_MIN_TOKENS", "LoadRow", "Rule", "level_c", "load_rows", "looping_items",
    "steady_window",
]  # fmt: skip

Rule = Literal["timed", "cut", "spread"]
"""How a cell's window was read: ``timed`` (arrivals in the fixed window after the
warm-up), ``cut`` (the block ran out of items first: the window ends at the last
request sent), ``spread`` (records of older code: no arrival times)."""

SERVER_MIN_TOKENS = 8
"""The fewest tokens a request decodes to count in :attr:`LoadRow.server_tok_s`: a
short answer's rate is a few passes' (llama-server's ``predicted_per_second``)."""


@dataclass(frozen=True)
class LoadRow:
    """One (arm, c) cell, medians over repetitions (units in the field names).

    Attributes:
        arm: the arm.
        c: concurrent clients.
        tok_s: every token that arrived in the window ÷ the window, median over
            repetitions (the module docstring).
        tok_s_lo: the lowest repetition's.
        tok_s_hi: the highest repetition's.
        p50_s: median end-to-end latency of an answer in flight in the window that
            ended (not cut off when the window closed), s.
        p99_s: 99th percentile, s.
        ttft_s: median time to first token, s.
        in_flight: mean requests in flight in the window.
        n: those answers (all repetitions).
        failed: requests of the cell's blocks that failed.
        reps: repetitions measured.
        routes: router arm: ``route→mode`` counts.
        tok_s_reps: repetition → its tok/s (the repetitions that measured one).
        server_tok_s: the median request's decode tok/s by its llama-server's own
            ``timings`` (``predicted_per_second``; requests of :data:`SERVER_MIN_TOKENS`
            tokens or more, looping items left out: a loop is drafted perfectly), all
            repetitions; None without timings.
        window_s: the window's length, median over repetitions, s; None when a block
            had no window (one request).
        loop_share: the share of the window's tokens from looping items (the ``loops``
            given to :func:`load_rows`), median over repetitions; counted in ``tok_s``.
        tok_s_noloop: the other items' tokens ÷ the same window, median: how the
            figure changes without the loops.
        repeat_share: the share of the window's tokens from a prompt sent earlier in
            the same block (a block that ran through its workload more than once):
            a speculative server drafts those from its memory of the first answer.
        rule: how the window was read (:data:`Rule`); the worst of the repetitions'.
    """

    arm: str
    c: int
    tok_s: float
    tok_s_lo: float
    tok_s_hi: float
    p50_s: float
    p99_s: float
    ttft_s: float | None
    in_flight: float
    n: int
    failed: int
    reps: int
    routes: dict[str, int]
    tok_s_reps: dict[int, float] = field(default_factory=dict[int, float])
    server_tok_s: float | None = None
    window_s: float | None = None
    loop_share: float = 0.0
    tok_s_noloop: float | None = None
    repeat_share: float = 0.0
    rule: Rule = "timed"


def looping_items(samples: Iterable[dict[str, Any]]) -> list[str]:
    """Items whose answer looped in any arm, at any c or repetition, sorted."""
    return sorted(
        {s["item"] for s in samples if s.get("ok") and s.get("repetition", 0) > LOOP_SCORE}
    )


def steady_window(samples: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """The steady part of a block that sent each item once: first request sent to last.

    Until the last item is sent every client has a request in flight; after it the
    block drains. The window of records without a timed window (:func:`load_rows`'s
    ``spread`` rule). Returns (start, end) in the records' ``t0`` clock, s; end ≤
    start when the block had one request.
    """
    starts = [s["t0"] for s in samples]
    return min(starts), max(starts)


def _overlap(a0: float, a1: float, lo: float, hi: float) -> float:
    return max(0.0, min(a1, hi) - max(a0, lo))


def _spread_between(s: dict[str, Any], lo: float, hi: float) -> float:
    """A request's tokens decoded inside [lo, hi], spread evenly from its first token on."""
    first = s["t0"] + (s.get("ttft_s") or 0.0)
    end = s["t0"] + s["wall_s"]
    n = float(s["tokens"] or 0)
    if end <= first:
        return n if lo <= end <= hi else 0.0
    return n * _overlap(first, end, lo, hi) / (end - first)


def _arrived(s: dict[str, Any]) -> float:
    """A timed sample's tokens whose text events arrived in its block's window."""
    pre, inside, post = (int(v) for v in s["ev"])
    events = pre + inside + post
    return float(s["tokens"] or 0) * inside / events if events else 0.0


def level_c(level: str) -> int:
    """The concurrency of a level tag (:attr:`~fronde.bench.protocol.Level.tag`).

    ``c32`` → 32, ``c24-gap0.25-plain`` → 24, the empty tag (one client) → 1.
    """
    head = level.split("-")[0]
    return int(head[1:]) if head.startswith("c") else 1


@dataclass(frozen=True)
class _Rep:
    """One block's figures (one repetition of a cell)."""

    tok_s: float
    noloop: float
    loop_share: float
    repeat_share: float
    in_flight: float
    window_s: float | None
    rule: Rule
    sent: list[dict[str, Any]]


def _one_rep(rep: Sequence[dict[str, Any]], loops: set[str]) -> _Rep | None:
    """A block's figures from its samples; None when no request ended ok."""
    ok = [s for s in rep if s["ok"]]
    if not ok:
        return None
    timed = [s for s in ok if "ev" in s and "win" in s]
    whole = False  # a block of one request (or all sent at once): its own span
    if timed:
        lo, hi = (float(v) for v in timed[0]["win"])
        rule: Rule = "cut" if any(s.get("cut") for s in timed) else "timed"
        got = {id(s): _arrived(s) for s in timed}
        counted = timed
    else:
        lo, hi = steady_window(ok)
        rule = "spread"
        if hi <= lo:
            whole, hi = True, max(s["t0"] + s["wall_s"] for s in ok)
        got = {id(s): _spread_between(s, lo, hi) for s in ok}
        counted = ok
    span = hi - lo
    if span <= 0:
        return None
    total = sum(got.values())
    looped = sum(got[id(s)] for s in counted if s["item"] in loops)
    repeated = sum(got[id(s)] for s in counted if int(s.get("pass") or 0) > 0)
    # The answers in flight at some time in the window that ended (not cut off when it
    # closed): a long answer that spans the window counts in the latencies.
    sent = [
        s
        for s in ok
        if rule == "spread"
        or (not s.get("cut_off") and s["t0"] <= hi and s["t0"] + s["wall_s"] >= lo)
    ]
    flight = sum(_overlap(s["t0"], s["t0"] + s["wall_s"], lo, hi) for s in ok) / span
    return _Rep(
        total / span,
        (total - looped) / span,
        looped / total if total else 0.0,
        repeated / total if total else 0.0,
        flight,
        None if whole else span,
        rule,
        sent,
    )


def load_rows(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> list[LoadRow]:
    """Every (arm, c) cell of ``samples`` (records of one load run), in run order.

    Args:
        samples: sample records (``arm``, ``level``, ``rep``, ``item``, ``ok``, ``t0``,
            ``wall_s``, ``tokens``; a timed block's ``win``, ``ev``, ``pass``).
        loops: the items reported apart as looping (:func:`looping_items`): their
            tokens stay in ``tok_s`` and leave ``tok_s_noloop``.
    """
    cells: dict[tuple[str, int], dict[int, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for s in samples:
        cells[(s["arm"], level_c(s["level"]))][s["rep"]].append(s)
    left = set(loops)
    rows: list[LoadRow] = []
    for (arm, c), reps in cells.items():
        figures = {int(k): f for k, rep in reps.items() if (f := _one_rep(rep, left))}
        rates = [f.tok_s for f in figures.values()]
        sent = [s for f in figures.values() for s in f.sent]
        walls = [s["wall_s"] for s in sent]
        ttfts = [s["ttft_s"] for s in sent if s.get("ttft_s") is not None]
        routes: Counter[str] = Counter()
        for s in sent:
            route: dict[str, Any] = s.get("route") or {}
            if "class" in route:
                routes[f"{route['class']}→{route.get('mode', '?')}"] += 1
        served = _server_rates(s for s in sent if s["item"] not in left)
        windows = [f.window_s for f in figures.values() if f.window_s is not None]

        def mid(values: list[float], digits: int = 1) -> float:
            return round(median(values), digits) if values else 0.0

        rows.append(
            LoadRow(
                arm,
                c,
                mid(rates),
                round(min(rates), 1) if rates else 0.0,
                round(max(rates), 1) if rates else 0.0,
                round(float(np.percentile(walls, 50)), 3) if walls else float("nan"),
                round(float(np.percentile(walls, 99)), 3) if walls else float("nan"),
                round(float(np.percentile(ttfts, 50)), 3) if ttfts else None,
                mid([f.in_flight for f in figures.values()]),
                len(sent),
                sum(not s["ok"] for r in reps.values() for s in r),
                len(rates),
                dict(routes.most_common()),
                {k: round(f.tok_s, 1) for k, f in sorted(figures.items())},
                round(median(served), 1) if served else None,
                round(median(windows), 2) if windows else None,
                mid([f.loop_share for f in figures.values()], 3),
                mid([f.noloop for f in figures.values()]) if figures else None,
                mid([f.repeat_share for f in figures.values()], 3),
                _worst([f.rule for f in figures.values()]),
            )
        )
    return rows


def _worst(rules: Sequence[Rule]) -> Rule:
    """The rule of the least steady window among a cell's repetitions."""
    for rule in ("spread", "cut"):
        if rule in rules:
            return rule
    return "timed"


def _server_rates(samples: Iterable[dict[str, Any]]) -> list[float]:
    """Each request's decode tok/s by its server's timings (:attr:`LoadRow.server_tok_s`)."""
    parsed = (Timings.parse(s.get("timings")) for s in samples)
    return [
        t.predicted_per_second
        for t in parsed
        if t is not None and t.predicted_n >= SERVER_MIN_TOKENS
    ]
