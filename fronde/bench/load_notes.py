"""The load page's side notes, read off a run's records.

Verify costs as the servers paid them, collapses, Fronde's own time, and whether Fronde
in front of the plain server gave its answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any, cast

from fronde.bench.breakeven import ServedCost, served_cost
from fronde.bench.load import PROXY
from fronde.bench.load_rows import level_c
from fronde.bench.load_verdict import single

__all__ = ["answer_lines", "own_time_lines", "quarantine_lines", "served_costs"]


def served_costs(samples: Sequence[dict[str, Any]]) -> dict[str, ServedCost]:
    """Each single static arm's :class:`~fronde.bench.breakeven.ServedCost` at c = 1.

    Fitted to its requests' ``timings`` (every repetition); arms that drafted nothing or
    served too few requests are left out.
    """
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        if s.get("level") == "" and s.get("ok") and single(s["arm"]) and s.get("timings"):
            by_arm.setdefault(s["arm"], []).append(s["timings"])
    fits = {arm: served_cost(t) for arm, t in by_arm.items()}
    return {arm: fit for arm, fit in fits.items() if fit is not None}


def quarantine_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """The router blocks whose state at their end counted collapses, one line each.

    A router block's record keeps ``/fronde/v1/router`` as it ended; a mode's
    ``collapses`` count the times the collapse rule fired on it. Lines read ``router-b,
    c=32, rep 2: baseline 16`` (repetitions from 1); a block run again counts as its
    last ok record.
    """
    last: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("type") == "block" and r.get("ok") and isinstance(r.get("router"), dict):
            last[r["block"]] = r
    lines: list[str] = []
    for key, r in last.items():
        modes: dict[str, Any] = r["router"].get("modes") or {}
        hit = {m: int(v.get("collapses") or 0) for m, v in modes.items()}
        hit = {m: n for m, n in hit.items() if n}
        if hit:
            level = (key.split("|") + [""] * 4)[3]  # workload|arm|rep|level
            where = f"{r.get('arm')}, c={level_c(level)}, rep {int(r.get('rep') or 0) + 1}"
            lines.append(where + ": " + ", ".join(f"{m} {n}" for m, n in hit.items()))
    return lines


def own_time_lines(samples: Sequence[dict[str, Any]]) -> list[str]:
    """Fronde's own time per Fronde arm and c, one line each, every repetition pooled.

    From each answer's ``x-fronde-overhead-ms`` (its time before the upstream call,
    waits for a slot excluded), ``x-fronde-gather-ms`` (the part held for a burst,
    ``router.gather_ms``) and ``x-fronde-settle-ms`` (a wait to learn the slot of a
    request the server placed itself; not in the overhead). Lines read ``router-b,
    c=32: 17.5 ms median, 148.1 most (96 requests); in the burst wait 15.0 median, 52.3
    most``.
    """
    cells: dict[tuple[str, int], list[tuple[float, float | None, float]]] = {}
    for s in samples:
        route = cast("dict[str, str]", s.get("route") or {})
        overhead, gather = route.get("overhead-ms"), route.get("gather-ms")
        if s.get("ok") and overhead is not None:
            cell = cells.setdefault((s["arm"], level_c(s["level"])), [])
            settle = float(route.get("settle-ms", 0.0))
            cell.append((float(overhead), None if gather is None else float(gather), settle))
    lines: list[str] = []
    for (arm, c), got in sorted(cells.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        overheads = [o for o, _, _ in got]
        line = (
            f"{arm}, c={c}: {median(overheads):.1f} ms median, {max(overheads):.1f} most "
            f"({len(got)} requests)"
        )
        gathers = [g for _, g, _ in got if g is not None]
        if gathers:
            line += f"; in the burst wait {median(gathers):.1f} median, {max(gathers):.1f} most"
        settles = [w for _, _, w in got if w > 0]
        if settles:
            line += (
                f"; and after it, {len(settles)} waited to learn a server's slot: "
                f"{median(settles):.1f} ms median, {max(settles):.1f} most"
            )
        lines.append(line)
    return lines


def answer_lines(samples: Sequence[dict[str, Any]]) -> list[str]:
    """Whether ``fr-plain`` gave the plain server's answers at c = 1, per session and rep.

    Lines read ``session 2026-12-04 19:55, rep 0: 48 of 66 the same; differ: chat-2, …``.
    Under load a batch's numerics make any two servers differ, so c ≥ 2 is not compared.
    """
    texts: dict[tuple[str, int, str], dict[str, str]] = {}
    for s in samples:
        if s.get("ok") and s["arm"] in ("plain", PROXY.name) and level_c(s["level"]) == 1:
            key = (str(s.get("session", "")), int(s["rep"]), s["arm"])
            texts.setdefault(key, {})[s["item"]] = str(s.get("text", ""))
    lines: list[str] = []
    for (session, rep, arm), plain in texts.items():
        fronde = texts.get((session, rep, PROXY.name))
        if arm != "plain" or fronde is None:
            continue
        both = [i for i in plain if i in fronde]
        differ = [i for i in both if plain[i] != fronde[i]]
        where = f"session {session}, " if session else ""
        line = f"{where}rep {rep}: {len(both) - len(differ)} of {len(both)} the same"
        if differ:
            shown = ", ".join(differ[:8]) + (", …" if len(differ) > 8 else "")
            line += f"; differ: {shown}"
        lines.append(line)
    return lines
