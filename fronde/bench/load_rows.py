# pyright: reportUnknownMemberType=false
"""A load run's figures per (arm, c): tok/s as a user receives it, latency, what looped.

A cell's tok/s is every streamed token that arrived inside the block's window ÷ the
window (:func:`load_rows`): an answer's tokens (usage, else ``timings.predicted_n``,
else its text events) spread evenly over its text events, the share that arrived in the
window counted (:func:`~fronde.bench.passes.timed_pass` records each answer's events
before, in and after it). A looping answer stays in: its tokens reached the user; it is
reported apart (:attr:`LoadRow.loop_share`). Records of older code carry no arrival
counts (``spread``): each request's tokens are spread evenly from its first token to its
end, the part inside the steady window (first request sent → last one sent) counted.
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
"""How a cell's window was read: ``timed`` (arrivals in the fixed window), ``cut`` (the
items ran out first: the window ends at the last request sent), ``spread`` (older code)."""

SERVER_MIN_TOKENS = 8
"""The fewest tokens a request decodes to count in :attr:`LoadRow.server_tok_s`."""


@dataclass(frozen=True)
class LoadRow:
    """One (arm, c) cell; figures are medians over repetitions, units in the names.

    Attributes:
        tok_s, tok_s_lo, tok_s_hi: tokens that arrived in the window ÷ the window: the
            median, lowest and highest repetition's; ``tok_s_reps`` each repetition's.
        p50_s, p99_s: end-to-end latency of the answers in flight in the window that
            ended (not cut off when it closed); ``ttft_s`` their median first token.
        in_flight: mean requests in flight in the window; ``n`` those answers (all
            repetitions), ``failed`` the cell's failed requests, ``reps`` repetitions.
        routes: router arm: ``route→mode`` counts.
        server_tok_s: the median request's decode tok/s by its server's own ``timings``
            (:data:`SERVER_MIN_TOKENS` or more, loops left out); None without timings.
        window_s: the window's length (None: a block of one request).
        loop_share, tok_s_noloop: the share of the window's tokens from looping items,
            and tok/s without them.
        repeat_share: the share from a prompt sent earlier in the same block (drafted
            from a speculative server's memory of the first answer).
        rule: how the window was read (:data:`Rule`), the worst repetition's.
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
    """(first request sent, last one sent) of a block of untimed records, ``t0`` clock, s.

    Every client has a request in flight until then; after, the block drains.
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
    """The concurrency of a level tag: ``c32`` → 32, ``c24-gap0.25-plain`` → 24, ``""`` → 1."""
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
    """Every (arm, c) cell of one load run's sample records, in run order.

    ``samples`` carry ``arm``, ``level``, ``rep``, ``item``, ``ok``, ``t0``, ``wall_s``,
    ``tokens`` (a timed block's also ``win``, ``ev``, ``pass``); ``loops``' tokens stay
    in ``tok_s`` and leave ``tok_s_noloop``.
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
