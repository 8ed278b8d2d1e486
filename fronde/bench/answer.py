"""The few lines that answer the verdict's question, printed last under the tables.

A reader who asked "is Fronde faster than one llama-server?" should not have to find
the answer among a dozen tables::

    Is Fronde faster than one llama-server? (A: 29 prompts × 2 reps; B: 12 steps)
      the best fixed arm: cascade = llama-server --spec-type ngram-simple,ngram-mod
      routing, cold: 0.94× cascade in total, 0.93× per prompt [0.88–0.98]
    VERDICT: FAIL: not faster than cascade (cold, warm); ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from fronde.bench.verdict import BOUNDS, Check, Table, best_static, verdict_of

__all__ = ["answer_lines"]

_LABELS = {
    "router": "routing, cold",
    "router-w": "routing, warm",
    "router-nh": "routing, cold, no hindsight",
    "router-z0": "routing, cold, point prediction",
    "router-fixc": "routing, cold, one draft cost",
}


def _label(arm: str) -> str:
    """``routing, cold`` for ``router``; an arm with no words of its own keeps its name."""
    return _LABELS.get(arm, arm)


def _x(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}×"


def _routers(t: Table) -> list[str]:
    return [a for a in t.arms if a.startswith("router")]


def _named(checks: Sequence[Check], prefix: str) -> Check | None:
    return next((c for c in checks if c.name.startswith(prefix)), None)


def _a_line(router: str, best: str, checks: Sequence[Check]) -> str:
    """Router ÷ the best fixed arm: total rate, and per prompt with its interval."""
    total = _named(checks, f"(a) {router} ÷ {best}, total")
    per = _named(checks, f"(a) {router} ÷ {best}, geomean")
    line = f"  {_label(router)}: {_x(total.value if total else math.nan)} {best} in total"
    if per is not None:
        ci = "" if math.isnan(per.low) else f" [{per.low:.2f}–{per.high:.2f}]"
        line += f", {_x(per.value)} per prompt{ci}"
    return line


def _short(router: str) -> str:
    return _label(router).removeprefix("routing, ")


def _domains_line(routers: Sequence[str], checks: Sequence[Check]) -> str:
    """Per routed arm, how many domains pass (b); how many were too small to judge."""
    parts: list[str] = []
    small = 0
    for r in routers:
        mine = [c for c in checks if c.name.startswith(f"(b) {r} ÷ ")]
        judged = [c for c in mine if c.measured]
        small = len(mine) - len(judged)  # the same domains for every arm
        parts.append(f"{_short(r)} {sum(c.passed for c in judged)} of {len(judged)}")
    tail = f" ({small} too small)" if small else ""
    return f"  per domain ≥ {BOUNDS['b']:.2f}× plain decoding: " + ", ".join(parts) + tail


def _reasons(router: str, best: str, checks: Sequence[Check]) -> list[str]:
    """What a routed arm failed, in words (a (b) domain too small to judge fails nothing)."""
    failed = [
        c
        for c in checks
        if c.name.split(" ")[1] == router
        and not c.passed
        and (c.measured or not c.name.startswith("(b)"))
    ]
    out: list[str] = []
    if any(c.name.startswith("(a)") for c in failed):
        out.append(f"not faster than {best}")
    domains = [c for c in failed if c.name.startswith("(b)")]
    if domains:
        n = len(domains)
        out.append(f"below {BOUNDS['b']:.2f}× plain decoding in {n} domain{'s' * (n > 1)}")
    oracle = [c for c in failed if c.name.startswith("(c)")]
    if any(c.measured for c in oracle):
        out.append(f"below {BOUNDS['c']:.2f}× the best of its own modes")
    elif oracle:
        out.append("no oracle figure (it needs 2 repetitions)")
    return out


def _session_line(b: Table) -> str | None:
    """Workload B: the router's time a token against the fastest other arm's."""
    if not b.items or "router" not in b.arms or len(b.arms) < 2:
        return None
    fastest = max((a for a in b.arms if a != "router"), key=b.total)
    ratio = b.total(fastest) / b.total("router")  # time a token: router's ÷ fastest's
    return (
        f"  agent sessions: routing {1000 / b.total('router'):.1f} ms/token,"
        f" {ratio:.2f}× {fastest}'s time a token (fastest other arm; below 1 is faster)"
    )


def answer_lines(
    a: Table, b: Table, checks: Sequence[Check], about: Mapping[str, str]
) -> list[str]:
    """The answer in words: workload A's checks per routed arm, workload B, the verdict.

    ``a``, ``b``: workload A's and B's tables (B may be empty); ``checks``: the verdict's
    checks of every routed arm of ``a``; ``about``: arm name → what serves it. The last
    line starts ``VERDICT:`` or ``no verdict:``.
    """
    routers = _routers(a)
    verdict = verdict_of(checks)
    session = _session_line(b)
    if verdict is None or not a.items:
        why = (
            "no valid prompt in workload A (see the left-out list)"
            if a.arms and not a.items
            else "it needs a routed arm and the base arm"
        )
        return ([session.strip()] if session else []) + [f"no verdict: {why}"]
    best = best_static(a)
    b_part = f"; B: {len(b.items)} steps" if session else ""
    lines = [
        f"Is Fronde faster than one llama-server? (A: {len(a.items)} prompts ×"
        f" {len(a.reps)} reps{b_part})",
        f"  the best fixed arm: {best} = {about.get(best, best)}",
        *(_a_line(r, best, checks) for r in routers),
        _domains_line(routers, checks),
    ]
    oracle = [(r, _named(checks, f"(c) {r} ÷ cross-fitted oracle")) for r in routers]
    if all(c is not None for _, c in oracle):
        figures = ", ".join(f"{_short(r)} {_x(c.value)}" for r, c in oracle if c)
        lines.append(f"  per prompt ÷ the best of Fronde's own modes: {figures}")
    if session:
        lines.append(session)
    if verdict == "PASS":
        lines.append(
            f"VERDICT: PASS: routing is at least as fast as {best}, within"
            f" {1 - BOUNDS['b']:.0%} of plain decoding in every domain and within"
            f" {1 - BOUNDS['c']:.0%} of the best of its own modes"
        )
        return lines
    who: dict[str, list[str]] = {}
    for r in routers:
        for reason in _reasons(r, best, checks):
            who.setdefault(reason, []).append(_short(r))
    lines.append("VERDICT: FAIL: " + "; ".join(f"{k} ({', '.join(v)})" for k, v in who.items()))
    return lines
