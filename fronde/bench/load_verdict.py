"""The load run's comparisons, each within one measuring session: verdict, ratios, curves.

A records file can hold blocks of several sessions (a run resumed on a fresh lease of
the GPU machine, or seeded with an earlier run's records; :func:`~fronde.bench.store.
sessions` names each block's). The same server read up to 2× apart from one session to
the next, so the verdict, the ratios and the curves saved for the router are taken
within one.

**Verdict** per router arm and c: its tok/s (every token counted,
:mod:`fronde.bench.load_rows`) ≥ the best static arm's (calibration servers and
``plain-nobs`` included: a user could run any of them) and its p99 ≤ that arm's. With
two repetitions or more each line also gives the **held-out** ratio
(:func:`held_out_ratios`). **Ratios** (:func:`ratio_sets`) tell slot placement and
routing apart: on an H100 (gemma, the agent mix, c = 8) ``pinned`` read 1.89–2.14×
``plain``, the router over ``pinned`` 1.07–1.21× (docs/slot-placement.md), so a router
arm ÷ ``plain`` mixes the two.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

from fronde.bench.load import (
    CONTROLS,
    PINNED,
    PROXY,
    ROUTED,
    ROUTERS,
    SINGLE,
    SINGLE_NH,
    SINGLE_PLAIN,
    SPREAD,
)
from fronde.bench.load_lengths import LengthTable, with_lengths
from fronde.bench.load_rows import LoadRow, load_rows, looping_items
from fronde.bench.store import Store, samples_of, sessions
from fronde.modes import Mode
from fronde.serving import LoadCurves

__all__ = [
    "Ratios", "arm_ratios", "by_session", "curves_from", "held_out_ratios", "latest_rows",
    "ratio_lines", "ratio_sets", "routed", "session_curves", "session_ratios", "session_rows",
    "session_spread", "session_verdicts", "single", "spread_ratios", "tagged_samples",
    "verdict_lines",
]  # fmt: skip

Ratios = dict[str, dict[str, dict[int, float]]]
"""Kind (``placement``, ``routing``, ``together``, ``topology``, ``hindsight``) → ``"num ÷ den"``
→ c → ratio."""

ABOUT = {
    "placement": "What slot placement gives (the plain server's requests on adjacent "
    "slots; no routing)",
    "routing": "What routing adds (the choice of mode and server, over one-mode placement)",
    "together": "Both together (a router arm against the plain server)",
    "topology": "One llama-server for every mode against one per mode (the router; "
    "a request forced to plain decoding)",
    "hindsight": "What feeding each answer to the counterfactual book costs (one server, "
    "the same router with `router.hindsight` off)",
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
    ``not run``, one where no answer of the router arm or that static arm ended in the
    window (no latency to compare: a window too short for the machine) ``INVALID``. With
    two repetitions the held-out ratio is added, median [lowest, highest], "not
    significant" when it falls on both sides of 1.
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
            if math.isnan(router.p99_s) or math.isnan(best.p99_s):
                what = f"no answer of {name} or {best.arm} ended in the window"
                out.append(f"c={c}: {name} INVALID: {what}")
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
        "hindsight": [(SINGLE, SINGLE_NH)],
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


def tagged_samples(store: Store) -> list[dict[str, Any]]:
    """``store``'s samples, each with its ``session`` label (``""`` before any run record)."""
    records = store.records()
    session = sessions(records)
    return [s | {"session": session.get(s["block_id"], "")} for s in samples_of(records)]


def by_session(samples: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``samples`` grouped by their ``session`` label, sessions in order of first sample."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault(str(s.get("session", "")), []).append(s)
    return groups


def session_spread(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> dict[int, float]:
    """``plain2 ÷ plain`` per c in the latest session that measured both; else ``{}``."""
    return session_ratios(samples, loops, SPREAD.name, "plain")


def session_ratios(
    samples: Sequence[dict[str, Any]], loops: Sequence[str], num: str, den: str
) -> dict[int, float]:
    """``num ÷ den`` per c (:func:`arm_ratios`) in the latest session that measured both.

    ``{}`` when no session did: two arms of different sessions are not compared.
    """
    return _latest(_session_rows(samples, loops), num, den)


def _session_rows(samples: Sequence[dict[str, Any]], loops: Sequence[str]) -> list[list[LoadRow]]:
    """Each session's rows, sessions in order."""
    return [load_rows(group, loops) for group in by_session(samples).values()]


def _latest(per_session: Sequence[Sequence[LoadRow]], num: str, den: str) -> dict[int, float]:
    """``num ÷ den`` per c in the last of ``per_session`` that measured both; else ``{}``."""
    for rows in reversed(per_session):
        if ratios := arm_ratios(rows, num, den):
            return ratios
    return {}


def session_curves(
    samples: Sequence[dict[str, Any]],
    calibration: Mapping[Mode, str],
    source: str,
    lengths: LengthTable | None = None,
) -> LoadCurves:
    """The load curves for the router arms about to run, from ``samples`` so far.

    Each (calibration arm, c) from the latest session that measured it; ``plain2 ÷
    plain`` from one session only. With ``lengths`` (``--draft-lengths``), the draft
    length by load and each measured mode's curve at its best length.
    """
    per_session = _session_rows(samples, looping_items(samples))
    rows = latest_rows(per_session)
    curves = curves_from(rows, dict(calibration), source)
    spread = _latest(per_session, SPREAD.name, "plain")
    curves = LoadCurves(curves.points, curves.source, tuple(spread.items()))
    return with_lengths(curves, rows, lengths) if lengths else curves


def latest_rows(per_session: Sequence[Sequence[LoadRow]]) -> list[LoadRow]:
    """Each (arm, c) row from the last of ``per_session`` (sessions in order) that has it."""
    rows: dict[tuple[str, int], LoadRow] = {}
    for group in per_session:  # later sessions replace earlier ones
        rows |= {(r.arm, r.c): r for r in group}
    return list(rows.values())


def session_rows(samples: Sequence[dict[str, Any]]) -> list[LoadRow]:
    """The rows :func:`session_curves` reads: each (arm, c) from its latest session."""
    return latest_rows(_session_rows(samples, looping_items(samples)))


def curves_from(rows: Sequence[LoadRow], calibration: dict[Mode, str], source: str) -> LoadCurves:
    """Each calibrated mode's load curve (its arm's tok/s at every c), and ``plain2 ÷ plain``."""
    points: dict[Mode, tuple[tuple[int, float], ...]] = {}
    for mode, arm in calibration.items():
        pts = sorted((r.c, r.tok_s) for r in rows if r.arm == arm and r.tok_s > 0)
        if pts:
            points[mode] = tuple(pts)
    return LoadCurves(points, source, tuple(spread_ratios(rows).items()))


def arm_ratios(rows: Sequence[LoadRow], num: str, den: str) -> dict[int, float]:
    """Per c, arm ``num``'s tok/s ÷ arm ``den``'s (medians), where both measured."""
    under = {r.c: r.tok_s for r in rows if r.arm == den and r.tok_s > 0}
    over = {r.c: r.tok_s for r in rows if r.arm == num and r.tok_s > 0}
    return {c: over[c] / under[c] for c in sorted(under) if c in over}


def spread_ratios(rows: Sequence[LoadRow]) -> dict[int, float]:
    """Per c, ``plain2``'s tok/s ÷ ``plain``'s (medians), where both measured."""
    return arm_ratios(rows, SPREAD.name, "plain")
