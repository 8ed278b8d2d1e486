"""The load run's verdict: each router arm against the best static arm at each c.

**Verdict** per router arm and c: its aggregate tok/s (every token counted,
:mod:`fronde.bench.load_rows`) ≥ the best static arm's (calibration servers and
``plain-nobs`` included: a user could run any of them), and its p99 ≤ that arm's.
With two repetitions or more each line also gives the **held-out** ratio
(:func:`held_out_ratios`): the best static arm chosen on the other repetitions, as a
user chooses a server before the run, instead of the highest of several noisy figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any

from fronde.bench.load import CONTROLS, ROUTED
from fronde.bench.load_rows import LoadRow, load_rows
from fronde.bench.load_sessions import by_session

__all__ = ["held_out_ratios", "routed", "session_verdicts", "single", "verdict_lines"]


def routed(arm: str) -> bool:
    """Whether ``arm`` is a router arm (:data:`~fronde.bench.load.ROUTED`)."""
    return arm in ROUTED


def single(arm: str) -> bool:
    """A static arm of one server a user runs unchanged, what the verdict compares.

    ``plain2`` is two servers, ``fr-plain`` goes through Fronde and ``pinned`` needs a
    client that names slots (:data:`~fronde.bench.load.CONTROLS`): none of them.
    """
    return not routed(arm) and arm not in CONTROLS


def _best_static(rows: Sequence[LoadRow], c: int) -> LoadRow | None:
    cands = [r for r in rows if r.c == c and single(r.arm) and r.tok_s > 0]
    return max(cands, key=lambda r: r.tok_s) if cands else None


def held_out_ratios(rows: Sequence[LoadRow], arm: str, c: int) -> list[float]:
    """``arm`` ÷ the best static arm at ``c``, that arm chosen on the *other* repetitions.

    Picking "the best static arm" as the highest of several noisy figures flatters it
    (the winner's curse: on the H200 one arm measured twice read up to 20 % apart, and
    the modes' curves lie closer than that), while a user chooses a server before
    seeing the run. For each repetition r of ``arm``, among the static arms that
    measured r and at least one other repetition of ``arm``'s, the one with the highest
    median over those others is the user's choice, and the ratio is ``arm``'s tok/s in
    r ÷ that arm's in r (cross-fitting). A static arm missing a repetition is left out
    of that repetition's choice only. Empty when ``arm`` has fewer than two
    repetitions at ``c``.
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

    PASS needs both the router's aggregate tok/s ≥ the best static arm's and its p99
    latency ≤ that arm's; a c a router arm has no row for is ``not run``. With two
    repetitions or more the line adds the held-out ratio (:func:`held_out_ratios`),
    median [lowest, highest]: the same comparison without the winner's curse, marked
    "not significant" when its repetitions fall on both sides of 1; the verdict stays
    on the in-sample one.
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
    """:func:`verdict_lines` within each measuring session of ``samples``.

    A sample's ``session`` (:func:`~fronde.bench.store.sessions`) names the machine and
    boot that measured it. All in one session (or none named): the verdict lines of
    all rows. Else each session's router arms are judged against the static arms of
    that session only, each line prefixed ``[session <label>]``; a session whose
    router arms met no static arm says so (INVALID, not compared), and a session of
    static arms only adds no line. ``loops`` (every session's) leaves the same items
    out everywhere.
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
