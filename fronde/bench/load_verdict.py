"""The load run's verdict and ratios: router arms against the static arms, per c.

**Verdict** per router arm and c: its tok/s (every token counted,
:mod:`fronde.bench.load_rows`) ≥ the best static arm's (calibration servers and
``plain-nobs`` included: a user could run any of them) and its p99 ≤ that arm's. With
two repetitions or more each line also gives the **held-out** ratio
(:func:`held_out_ratios`). **Ratios** (:func:`ratio_sets`) tell slot placement and
routing apart: on an H100 (gemma, the agent mix, c = 8) ``pinned`` read 1.89–2.14×
``plain``, the router over ``pinned`` 1.07–1.21× (docs/slot-placement.md), so a router
arm ÷ ``plain`` mixes the two. Every ratio is taken within one measuring session.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from fronde.bench.load import CONTROLS, PINNED, PROXY, ROUTED, ROUTERS, SINGLE, SINGLE_PLAIN
from fronde.bench.load_rows import LoadRow, load_rows
from fronde.bench.load_sessions import by_session, session_ratios

__all__ = [
    "Ratios", "held_out_ratios", "ratio_lines", "ratio_sets", "routed", "session_verdicts",
    "single", "verdict_lines",
]  # fmt: skip

Ratios = dict[str, dict[str, dict[int, float]]]
"""Kind (``placement``, ``routing``, ``together``, ``topology``) → ``"num ÷ den"`` → c → ratio."""

ABOUT = {
    "placement": "What slot placement gives (the plain server's requests on adjacent "
    "slots; no routing)",
    "routing": "What routing adds (the choice of mode and server, over one-mode placement)",
    "together": "Both together (a router arm against the plain server)",
    "topology": "One llama-server for every mode against one per mode (the router; "
    "a request forced to plain decoding)",
}


def routed(arm: str) -> bool:
    """Whether ``arm`` is a router arm (:data:`~fronde.bench.load.ROUTED`)."""
    return arm in ROUTED


def single(arm: str) -> bool:
    """Whether ``arm`` is one server a user runs unchanged (no router arm, no control)."""
    return not routed(arm) and arm not in CONTROLS


def _best_static(rows: Sequence[LoadRow], c: int) -> LoadRow | None:
    cands = [r for r in rows if r.c == c and single(r.arm) and r.tok_s > 0]
    return max(cands, key=lambda r: r.tok_s) if cands else None


def held_out_ratios(rows: Sequence[LoadRow], arm: str, c: int) -> list[float]:
    """``arm`` ÷ the best static arm at ``c``, that arm chosen on the *other* repetitions.

    The highest of several noisy figures flatters the best static arm (the winner's
    curse: on the H200 one arm read up to 20 % apart between repetitions), while a user
    chooses a server before the run. For each repetition r of ``arm``, the static arm
    with the highest median over ``arm``'s other repetitions is chosen, and the ratio is
    taken in r (cross-fitting). Empty with fewer than two repetitions.
    """
    router = next((r for r in rows if r.arm == arm and r.c == c), None)
    static = [r for r in rows if r.c == c and single(r.arm)]
    if router is None or len(router.tok_s_reps) < 2:
        return []
    out: list[float] = []
    for rep, mine in sorted(router.tok_s_reps.items()):
        others = [k for k in router.tok_s_reps if k != rep]

        def held(r: LoadRow, others: list[int] = others) -> list[float]:
            return [r.tok_s_reps[k] for k in others if k in r.tok_s_reps]

        cands = [r for r in static if rep in r.tok_s_reps and held(r)]
        if not cands:
            continue
        chosen = max(cands, key=lambda r: median(held(r)))
        if chosen.tok_s_reps[rep] > 0:
            out.append(mine / chosen.tok_s_reps[rep])
    return out


def verdict_lines(rows: Sequence[LoadRow]) -> list[str]:
    """Per router arm and c: ÷ the best static arm in tok/s and p99, and PASS or FAIL.

    PASS needs tok/s ≥ and p99 ≤ the best static arm's; a c without the router arm is
    ``not run``. With two repetitions the held-out ratio is added, median [lowest,
    highest], "not significant" when it falls on both sides of 1.
    """
    out: list[str] = []
    names = [a for a in ROUTED if any(r.arm == a for r in rows)] or ["router"]
    for name in names:
        for c in sorted({r.c for r in rows}):
            best = _best_static(rows, c)
            router = next((r for r in rows if r.arm == name and r.c == c), None)
            if best is None or router is None or router.tok_s <= 0:
                out.append(f"c={c}: {name} not run")
                continue
            ratio = router.tok_s / best.tok_s
            tail = router.p99_s / best.p99_s if best.p99_s > 0 else float("nan")
            ok = ratio >= 1.0 and tail <= 1.0
            held = held_out_ratios(rows, name, c)
            note = ""
            if held:
                lo, hi = min(held), max(held)
                note = f", held out {median(held):.3f}× [{lo:.3f}, {hi:.3f}]"
                note += ", not significant" if lo < 1.0 < hi else ""
            out.append(
                f"c={c}: {name} {router.tok_s:.0f} tok/s = {ratio:.3f}× {best.arm} "
                f"[{router.tok_s_lo / best.tok_s:.3f}, {router.tok_s_hi / best.tok_s:.3f}], "
                f"p99 {router.p99_s:.2f} s = {tail:.2f}×{note} → {'PASS' if ok else 'FAIL'}"
            )
    return out


def session_verdicts(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> list[str]:
    """:func:`verdict_lines` within each measuring session (a sample's ``session``).

    One session: the plain lines. Several: each session's router arms against its own
    static arms, lines prefixed ``[session <label>]``; router arms with no static arm in
    their session are INVALID; a session of static arms only adds no line.
    """
    groups = by_session(samples)
    if len(groups) <= 1:
        return verdict_lines(load_rows(samples, loops))
    out: list[str] = []
    for label, group in groups.items():
        rows = load_rows(group, loops)
        if not any(routed(r.arm) for r in rows):
            continue
        if not any(single(r.arm) and r.tok_s > 0 for r in rows):
            out.append(
                f"[session {label}] router arms with no static arm measured in that "
                "session: INVALID, not compared"
            )
            continue
        out += [f"[session {label}] {line}" for line in verdict_lines(rows)]
    return out


def ratio_sets(
    samples: Sequence[dict[str, Any]], loops: Sequence[str], arms: Sequence[str]
) -> Ratios:
    """The placement, routing, together and topology ratios of the ``arms`` measured.

    Only those both of whose arms one session measured (``samples`` carry ``session``).
    """
    routers = [r for r in ROUTED if r in arms]
    pairs = {
        "placement": [(PINNED.name, "plain"), (PROXY.name, "plain")],
        "routing": [(r, d) for r in routers for d in (PROXY.name, PINNED.name)],
        "together": [(r, "plain") for r in routers],
        "topology": [(SINGLE, ROUTERS["best"]), (SINGLE_PLAIN.name, PROXY.name)],
    }
    out: Ratios = {}
    for kind, wanted in pairs.items():
        got = {
            f"{num} ÷ {den}": ratios
            for num, den in wanted
            if (ratios := session_ratios(samples, loops, num, den))
        }
        if got:
            out[kind] = got
    return out


def ratio_lines(ratios: Mapping[str, Mapping[str, Mapping[int, float]]]) -> list[str]:
    """The page's section for :func:`ratio_sets`; [] when there is no ratio."""
    if not ratios:
        return []
    lines = [
        "",
        "## Placement and routing (tok/s ratios, same session)",
        "",
        "`pinned` is the plain server with client k sending `id_slot` = k; `fr-plain` is "
        "Fronde with baseline forced, in front of the same server (its slot placement "
        "and its hop). A router arm's ratio to them is what routing adds; to `plain`, "
        "both together.",
    ]
    for kind, about in ABOUT.items():
        if kind not in ratios:
            continue
        lines += ["", f"{about}:", ""]
        lines += [
            f"- {label}: " + ", ".join(f"c={c} {v:.2f}×" for c, v in sorted(by_c.items()))
            for label, by_c in ratios[kind].items()
        ]
    return lines
