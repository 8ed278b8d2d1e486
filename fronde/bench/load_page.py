# pyright: reportUnknownMemberType=false
"""The load run's verdict, page and plot (``fronde bench load``; rows from :mod:`.load`).

**Verdict** per router arm and c: its aggregate tok/s ≥ the best static arm's
(calibration servers included: a user could run any of them), and its p99 ≤ that
arm's. With two repetitions or more each line also gives the **held-out** ratio
(:func:`held_out_ratios`): the best static arm chosen on the other repetitions, as a
user chooses a server before the run, instead of the highest of several noisy figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from statistics import median
from typing import Any, cast

from fronde.bench.breakeven import ServedCost, served_cost
from fronde.bench.load import PROXY, ROUTERS, SPREAD, LoadRow, level_c, load_rows
from fronde.bench.load_sessions import by_session, spread_ratios
from fronde.evidence.calibration import LoadCurves

__all__ = [
    "answer_lines",
    "arm_colours",
    "held_out_ratios",
    "load_markdown",
    "load_plot",
    "own_time_lines",
    "quarantine_lines",
    "rows_json",
    "served_costs",
    "session_verdicts",
    "spread_ratios",
    "verdict_lines",
]


def _routed(arm: str) -> bool:
    return arm in ROUTERS.values()


def _single(arm: str) -> bool:
    """A static arm of one server, what the verdict compares.

    ``plain2`` is two servers and ``fr-plain`` goes through Fronde: neither.
    """
    return not _routed(arm) and arm not in (SPREAD.name, PROXY.name)


def _best_static(rows: Sequence[LoadRow], c: int) -> LoadRow | None:
    cands = [r for r in rows if r.c == c and _single(r.arm) and r.tok_s > 0]
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
    static = [r for r in rows if r.c == c and _single(r.arm)]
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
    names = [a for a in ROUTERS.values() if any(r.arm == a for r in rows)] or ["router"]
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


def served_costs(samples: Sequence[dict[str, Any]]) -> dict[str, ServedCost]:
    """Each single static arm's :class:`~fronde.bench.breakeven.ServedCost` at c = 1.

    From the ``timings`` of its requests alone on the server (every repetition); arms
    that drafted nothing (plain decoding) or too few requests are left out.
    """
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        if s.get("level") == "" and s.get("ok") and _single(s["arm"]) and s.get("timings"):
            by_arm.setdefault(s["arm"], []).append(s["timings"])
    fits = {arm: served_cost(t) for arm, t in by_arm.items()}
    return {arm: fit for arm, fit in fits.items() if fit is not None}


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
        if not any(_routed(r.arm) for r in rows):
            continue
        if not any(_single(r.arm) and r.tok_s > 0 for r in rows):
            out.append(
                f"[session {label}] router arms with no static arm measured in that "
                "session: INVALID, not compared"
            )
            continue
        out += [f"[session {label}] {line}" for line in verdict_lines(rows)]
    return out


def quarantine_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    """The router blocks whose state at their end counted collapses, one line each.

    Each router block's record keeps ``/fronde/v1/router`` as it ended (``router``);
    a mode's ``collapses`` count the times the collapse rule fired on it
    (:mod:`fronde.evidence.measure`), each one (re)starting its quarantine. Lines read
    ``router-b, c=32, rep 2: baseline 16`` (repetitions from 1); a block with none
    gives no line. ``records``: a store's records, in file order (a block run again
    counts as its last ok record).
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

    From the ``x-fronde-overhead-ms`` header each answer through Fronde carries (its
    time before the upstream call, waits for a slot excluded) and, where the router
    held requests for a burst (``router.gather_ms``), ``x-fronde-gather-ms``, the part
    of it spent in that wait (a busy event loop's delay in waking it included). Lines
    read ``router-b, c=32: 17.5 ms median, 148.1 most (96 requests); in the burst
    wait 15.0 median, 52.3 most``; where requests waited, before the upstream call, to
    learn the slot of a request the server placed itself (``x-fronde-settle-ms``,
    :meth:`~fronde.backends.slots.SlotPins.settle`; not in the overhead), how many and
    how long. Samples without the header (static arms, failed requests) give none.
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
    """Whether Fronde in front of the plain server gave its answers, one client at a time.

    ``fr-plain`` is the plain arm's server argv behind Fronde, every request forced
    there: at c = 1 each item should get the plain server's text. One line per session
    and repetition measuring both, e.g. ``session 2026-12-04 19:55, rep 0: 48 of 66 the
    same; differ: chat-2, format-js-4, …``. Under load (c ≥ 2) the text differs between
    any two servers, ``plain2`` included (a batch's numerics depend on what else is in
    it), so those levels are not compared. Measured on the H200: 18 of 66 SmolLM2 answers
    differed while Fronde pinned every request to slot 0 (before 87b47ec).
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


def load_markdown(
    rows: Sequence[LoadRow],
    loops: Sequence[str],
    title: str,
    legend: dict[str, str],
    curves: LoadCurves | None,
    verdict: Sequence[str] | None = None,
    spread: Mapping[int, float] | None = None,
    costs: Mapping[str, ServedCost] | None = None,
    quarantines: Sequence[str] = (),
    proxy: Mapping[str, Mapping[int, float]] | None = None,
    own: Sequence[str] = (),
    answers: Sequence[str] = (),
    screened: Sequence[str] = (),
) -> str:
    """The results page: the table per c, the verdict, the curves saved, what was left out.

    ``verdict``: its lines (:func:`session_verdicts`); by default :func:`verdict_lines`
    of ``rows``. ``spread``: ``plain2 ÷ plain`` per c, within one session
    (:func:`~fronde.bench.load_sessions.session_spread`); by default
    :func:`spread_ratios` of ``rows``. ``costs``: each speculative static arm's verify
    cost as its server paid it (:func:`served_costs`), a section when given.
    ``quarantines``: :func:`quarantine_lines`, a section when there are any.
    ``proxy``: ``"fr-plain ÷ plain"`` and each ``"<router arm> ÷ fr-plain"`` → per c,
    within one session (:func:`~fronde.bench.load_sessions.session_ratios`), a
    section when given. ``own``: :func:`own_time_lines`, a section when there are any;
    ``answers``: :func:`answer_lines`, likewise. ``screened``: the items the run's
    screen kept out of every block (never sent; the rows' ``n`` counts the rest).
    """
    lines = [
        f"# {title}",
        "",
        "One row per (arm, c): c closed-loop streaming clients, every block on fresh "
        "servers; tok/s = aggregate decode tok/s from the first request sent to the "
        "last one sent (all c clients busy; the drain after it left out), median over "
        "repetitions [lowest, highest]; p50, p99 = end-to-end latency of one request; "
        "ttft = median time to first token; srv = the median request's decode tok/s by "
        "its server's own timings; load = mean requests in flight then; window = that "
        "span's length, median over repetitions (tok/s rests on it: the shorter, the "
        "noisier).",
        "",
        "| c | arm | tok/s | [lo, hi] | p50 s | p99 s | ttft s | srv | load | window s | n "
        "| failed | reps |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(rows, key=lambda r: (r.c, not _routed(r.arm), r.arm)):
        ttft = f"{r.ttft_s:.3f}" if r.ttft_s is not None else "-"
        srv = f"{r.server_tok_s:.0f}" if r.server_tok_s is not None else "-"
        window = f"{r.window_s:.1f}" if r.window_s is not None else "-"
        lines.append(
            f"| {r.c} | {r.arm} | {r.tok_s:.0f} | [{r.tok_s_lo:.0f}, {r.tok_s_hi:.0f}] | "
            f"{r.p50_s:.2f} | {r.p99_s:.2f} | {ttft} | {srv} | {r.in_flight:.1f} | {window} | "
            f"{r.n} | {r.failed} | {r.reps} |"
        )
    lines += ["", "## Verdict (router against the best static arm at each c)", ""]
    if verdict is None:
        verdict = verdict_lines(rows)
    elif any(v.startswith("[session ") for v in verdict):
        lines += [
            "The table mixes measuring sessions (machine leases); the verdict compares "
            "arms within one session only: the same server read up to 2× apart from one "
            "lease to the next.",
            "",
        ]
    lines += [f"- {v}" for v in verdict]
    routed = [r for r in rows if _routed(r.arm)]
    if routed:
        lines += ["", "## Where the router sent requests", ""]
        lines += [
            f"- {r.arm}, c={r.c}: " + ", ".join(f"{k} {v}" for k, v in r.routes.items())
            for r in routed
        ]
    if quarantines:
        lines += [
            "",
            "## Collapses (the collapse rule, each router block's state at its end)",
            "",
            "Each collapse (re)starts the mode's quarantine (`router.quarantine_s`): no "
            "request goes there while another ready mode is not quarantined. Since commit "
            "6222fa6 the rule judges only generations that run one at a time, so with "
            "parallel slots none is expected; earlier runs judged them there too:",
            "",
            *[f"- {q}" for q in quarantines],
        ]
    if spread is None:
        spread = spread_ratios(rows)
    if spread:
        lines += [
            "",
            "## Does spreading pay? (`plain2` ÷ `plain`)",
            "",
            "Two plain llama-servers, each request to the less busy, against one, same "
            "argv and slots: "
            + ", ".join(f"c={c} {v:.2f}×" for c, v in spread.items())
            + ". Above 1, a second process adds throughput at that load (the step is "
            "spent on the CPU); at or below 1, the processes take turns on the device.",
        ]
    elif any(r.arm == SPREAD.name for r in rows):
        lines += [
            "",
            "## Does spreading pay? (`plain2` ÷ `plain`)",
            "",
            "Not compared: `plain2` and `plain` were measured in different sessions.",
        ]
    if proxy:
        lines += ["", "## What the proxy itself changes (`fr-plain`)", ""]
        lines += [
            "`fr-plain` is Fronde in front of the plain server alone, every request forced "
            "there: its ratio to `plain` is the hop's own effect on the same server plus "
            "the spread between blocks, a router arm's ratio to it what routing adds (its "
            "other servers up beside it included). Same session, tok/s (on the H200, gemma "
            "c = 32, it read 1.17× where the hop alone, 10 paired blocks of "
            "`scripts/gpu/hop_probe.py`, read 0.99× [0.94, 1.03]):",
            "",
            *[
                f"- {label}: " + ", ".join(f"c={c} {v:.2f}×" for c, v in ratios.items())
                for label, ratios in proxy.items()
            ],
        ]
    if own:
        lines += [
            "",
            "## Fronde's own time (`x-fronde-overhead-ms`)",
            "",
            "Each answer through Fronde: the time from its arrival to the upstream call, "
            "waits for a slot left out, and of it the time held for a burst of requests "
            "to end (`router.gather_ms`, the event loop's delay in waking it included):",
            "",
            *[f"- {line}" for line in own],
        ]
    if answers:
        lines += [
            "",
            "## Answers at c = 1 (`fr-plain` against `plain`)",
            "",
            "The plain server's argv behind Fronde and alone, one request at a time: each "
            "item's text should be the same (under load a batch's numerics make any two "
            "servers differ, so c ≥ 2 is not compared):",
            "",
            *[f"- {line}" for line in answers],
        ]
    if costs:
        lines += [
            "",
            "## Verify cost as the servers paid it (c = 1)",
            "",
            "Each request's decode time fitted to pass_ms × passes + drafted_ms × drafted "
            "(`fronde.bench.breakeven.served_cost`); draft cost = drafted_ms ÷ pass_ms, "
            "in passes, the unit of `router.draft_cost`: "
            + "; ".join(
                f"{arm} {c.pass_ms:.2f} ms a pass, {c.drafted_ms:.2f} ms a drafted token, "
                f"draft cost {c.draft_cost:.3f} ({c.requests} requests, {c.drafted} drafted)"
                for arm, c in costs.items()
            )
            + ".",
        ]
    if curves is not None:
        t = curves.threshold()
        lines += [
            "",
            "## Load curves (calibration, in-sample)",
            "",
            "Aggregate tok/s of each mode's backend alone, per c, each from the latest "
            "session that measured it, as `fronde bench load` saves them for "
            "`fronde serve` before its router arms: "
            + "; ".join(
                f"{m}: " + ", ".join(f"{c}→{v:.0f}" for c, v in p) for m, p in curves.points.items()
            ),
            f"Plain decoding serves the most from c = {t}."
            if t is not None
            else "Plain decoding is never the fastest backend at the loads measured.",
        ]
    lines += [
        "",
        f"Left out of tokens and latencies (looping in some arm): {len(loops)}"
        + (f": {', '.join(loops)}" if loops else ""),
        "",
        "Never sent (their answer looped on a fresh plain server at the largest c before "
        f"the run; `--no-screen` keeps them): {len(screened)}"
        + (f": {', '.join(screened)}" if screened else ""),
        "",
        "Arms:",
        *[f"- `{k}`: {v}" for k, v in legend.items()],
        "",
    ]
    return "\n".join(lines)


def arm_colours(arms: Sequence[str]) -> dict[str, tuple[float, float, float]]:
    """A distinct colour (RGB, 0–1) per arm, in order, for up to 20 arms, then again.

    matplotlib's ``tab20`` with its ten strong colours first, then their light pairs: a
    load run has up to 11 arms (the default cycle, ``tab10``, gave ``plain`` and
    ``router-t`` the same blue).
    """
    from matplotlib import colormaps

    tab20 = colormaps["tab20"]  # 20 colours: a strong one, then its light pair
    order = [tab20(i)[:3] for i in (*range(0, 20, 2), *range(1, 20, 2))]
    return {arm: order[i % len(order)] for i, arm in enumerate(arms)}


def load_plot(rows: Sequence[LoadRow], path: Path, title: str) -> None:
    """Throughput and p99 latency against c, one line per arm, into ``path`` (PNG).

    Each arm has its own colour (:func:`arm_colours`), Fronde's arms a thick line and
    the static ones a dashed one; the legend stands right of both panels, off the points.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12.5, 4))
    arms = list(dict.fromkeys(r.arm for r in rows))
    colours = arm_colours(arms)
    for arm in arms:
        pts = sorted((r.c, r.tok_s, r.p99_s) for r in rows if r.arm == arm and r.tok_s > 0)
        if not pts:
            continue
        cs = [p[0] for p in pts]
        style = {"linewidth": 2.5} if _routed(arm) else {"linewidth": 1.2, "linestyle": "--"}
        ax1.plot(cs, [p[1] for p in pts], marker="o", label=arm, color=colours[arm], **style)
        ax2.plot(cs, [p[2] for p in pts], marker="o", label=arm, color=colours[arm], **style)
    for ax, label in ((ax1, "aggregate decode tok/s"), (ax2, "p99 latency, s (lower is better)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients c")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0.0, 0.0, 0.88, 1.0))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rows_json(rows: Sequence[LoadRow]) -> list[dict[str, Any]]:
    """The rows as JSON objects (``arm``, ``c``, ``tok_s``, ``p50_s``, ``p99_s``, …)."""
    return [asdict(r) for r in rows]
