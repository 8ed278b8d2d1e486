# pyright: reportUnknownMemberType=false
"""The load run's page and plot.

The rows come from :mod:`.load_rows`, the verdict and ratios from :mod:`.load_verdict`,
the side notes from :mod:`.load_report`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fronde.bench.breakeven import ServedCost
from fronde.bench.load import SPREAD
from fronde.bench.load_rows import LoadRow
from fronde.bench.load_verdict import ratio_lines, routed, spread_ratios, verdict_lines
from fronde.serving import LoadCurves

__all__ = ["arm_colours", "load_markdown", "load_plot", "rows_json"]


TIMED_ABOUT = (
    "One row per (arm, c): c closed-loop streaming clients over keep-alive connections, "
    "round the workload again when it ends, for a warm-up and then a window of fixed "
    "length, each block on fresh servers. tok/s = every streamed token that arrived in "
    "the window ÷ the window (an answer's tokens, by its usage, spread over its text "
    "events; answers still streaming when the window closes are cut off there, their "
    "text events counted one token each), median over repetitions [lowest, highest]; "
)
ONCE_ABOUT = (
    "One row per (arm, c): c streaming clients sending each item once, a new connection "
    "a request, each block on fresh servers. tok/s = every token, read as `†` says "
    "below, median over repetitions [lowest, highest]; "
)
TABLE_ABOUT = (
    "loops = the share of those tokens from items that looped in some arm (counted in "
    "tok/s), w/o loops = tok/s without them; repeats = the share from a prompt sent "
    "earlier in the same block (a speculative server drafts it from memory); p50, p99 = "
    "end-to-end latency of an answer in flight in the window that ended; ttft = median "
    "time to first token; srv = the median request's decode tok/s by its server's own "
    "timings (loops left out); load = mean requests in flight in the window; window = "
    "its length, s."
)
"""The paragraph over the table, after how its blocks ran (timed, or each item once)."""

CUT_NOTE = (
    "`*` window cut: the block sent every item once (`--once`) before the window's end, "
    "so its window ends at the last request sent."
)

SPREAD_NOTE = (
    "`†` records of a run before timed windows: no arrival times were recorded, so "
    "tok/s = every token, each request's tokens spread evenly from its first token to "
    "its end, counted inside the steady window (first request sent → last one sent); "
    "on a block shorter than its clients' first answers (c = 32 on 52 items: 1.2–1.7 s) "
    "that is the first burst, not a steady state."
)


def section(head: str, *body: str) -> list[str]:
    """A page section's lines: a blank line, the heading, a blank line, ``body``."""
    return ["", head, "", *body]


def _table(rows: Sequence[LoadRow]) -> list[str]:
    """The rows as the page's table, with the notes its marks need."""
    rules = {r.rule for r in rows}
    lines = [
        (ONCE_ABOUT if rules == {"spread"} else TIMED_ABOUT) + TABLE_ABOUT,
        "",
        "| c | arm | tok/s | [lo, hi] | loops | w/o loops | repeats | p50 s | p99 s | ttft s "
        "| srv | load | window s | n | failed | reps |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mark = {"timed": "", "cut": " *", "spread": " †"}
    for r in sorted(rows, key=lambda r: (r.c, not routed(r.arm), r.arm)):
        ttft = f"{r.ttft_s:.3f}" if r.ttft_s is not None else "-"
        srv = f"{r.server_tok_s:.0f}" if r.server_tok_s is not None else "-"
        window = f"{r.window_s:.1f}{mark[r.rule]}" if r.window_s is not None else "-"
        noloop = f"{r.tok_s_noloop:.0f}" if r.tok_s_noloop is not None else "-"
        lines.append(
            f"| {r.c} | {r.arm} | {r.tok_s:.0f} | [{r.tok_s_lo:.0f}, {r.tok_s_hi:.0f}] | "
            f"{r.loop_share:.0%} | {noloop} | {r.repeat_share:.0%} | "
            f"{r.p50_s:.2f} | {r.p99_s:.2f} | {ttft} | {srv} | {r.in_flight:.1f} | {window} | "
            f"{r.n} | {r.failed} | {r.reps} |"
        )
    lines += ["", CUT_NOTE] if "cut" in rules else []
    lines += ["", SPREAD_NOTE] if "spread" in rules else []
    return lines


def _verdict_section(rows: Sequence[LoadRow], verdict: Sequence[str] | None) -> list[str]:
    """The verdict lines under their heading, and where the router sent requests."""
    lines = section("## Verdict (router against the best static arm at each c)")
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
    sent = [r for r in rows if routed(r.arm)]
    if sent:
        lines += section("## Where the router sent requests")
        lines += [
            f"- {r.arm}, c={r.c}: " + ", ".join(f"{k} {v}" for k, v in r.routes.items())
            for r in sent
        ]
    return lines


def _spread_section(rows: Sequence[LoadRow], spread: Mapping[int, float] | None) -> list[str]:
    """``plain2 ÷ plain``: does a second process pay?"""
    head = section("## Does spreading pay? (`plain2` ÷ `plain`)")
    if spread is None:
        spread = spread_ratios(rows)
    if spread:
        return [
            *head,
            "Two plain llama-servers, each request to the less busy, against one, same "
            "argv and slots: "
            + ", ".join(f"c={c} {v:.2f}×" for c, v in spread.items())
            + ". Above 1, a second process adds throughput at that load (the step is "
            "spent on the CPU); at or below 1, the processes take turns on the device.",
        ]
    if any(r.arm == SPREAD.name for r in rows):
        return [*head, "Not compared: `plain2` and `plain` were measured in different sessions."]
    return []


def _notes(quarantines: Sequence[str], own: Sequence[str], answers: Sequence[str]) -> list[str]:
    """The collapses, Fronde's own time and the c = 1 answers, each a section if any."""
    lines: list[str] = []
    if quarantines:
        lines += section(
            "## Collapses (the collapse rule, each router block's state at its end)",
            "Each collapse (re)starts the mode's quarantine (`router.quarantine_s`): no "
            "request goes there while another ready mode is not quarantined. Since commit "
            "6222fa6 the rule judges only generations that run one at a time, so with "
            "parallel slots none is expected; earlier runs judged them there too:",
            "",
            *[f"- {q}" for q in quarantines],
        )
    if own:
        lines += section(
            "## Fronde's own time (`x-fronde-overhead-ms`)",
            "Each answer through Fronde: the time from its arrival to the upstream call, "
            "waits for a slot left out, and of it the time held for a burst of requests "
            "to end (`router.gather_ms`, the event loop's delay in waking it included):",
            "",
            *[f"- {line}" for line in own],
        )
    if answers:
        lines += section(
            "## Answers at c = 1 (`fr-plain` against `plain`)",
            "The plain server's argv behind Fronde and alone, one request at a time: each "
            "item's text should be the same (under load a batch's numerics make any two "
            "servers differ, so c ≥ 2 is not compared):",
            "",
            *[f"- {line}" for line in answers],
        )
    return lines


def _calibration(costs: Mapping[str, ServedCost] | None, curves: LoadCurves | None) -> list[str]:
    """The verify costs the servers paid and the load curves saved, each if given."""
    lines: list[str] = []
    if costs:
        lines += section(
            "## Verify cost as the servers paid it (c = 1)",
            "Each request's decode time fitted to pass_ms × passes + drafted_ms × drafted "
            "(`fronde.bench.breakeven.served_cost`); draft cost = drafted_ms ÷ pass_ms, "
            "in passes, the unit of `router.draft_cost`: "
            + "; ".join(
                f"{arm} {c.pass_ms:.2f} ms a pass, {c.drafted_ms:.2f} ms a drafted token, "
                f"draft cost {c.draft_cost:.3f} ({c.requests} requests, {c.drafted} drafted)"
                for arm, c in costs.items()
            )
            + ".",
        )
    if curves is not None:
        t = curves.threshold()
        lines += section(
            "## Load curves (calibration, in-sample)",
            "Aggregate tok/s of each mode's backend alone, per c, each from the latest "
            "session that measured it, as `fronde bench load` saves them for "
            "`fronde serve` before its router arms: "
            + "; ".join(
                f"{m}: " + ", ".join(f"{c}→{v:.0f}" for c, v in p) for m, p in curves.points.items()
            ),
            f"Plain decoding serves the most from c = {t}."
            if t is not None
            else "Plain decoding is never the fastest backend at the loads measured.",
        )
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
    ratios: Mapping[str, Mapping[str, Mapping[int, float]]] | None = None,
    own: Sequence[str] = (),
    answers: Sequence[str] = (),
    screened: Sequence[str] = (),
    about: Sequence[str] = (),
) -> str:
    """The results page: the table per c, the verdict, the ratios, the curves saved.

    ``verdict`` defaults to :func:`verdict_lines` of ``rows``, ``spread`` (``plain2 ÷
    plain`` per c, within one session) to :func:`spread_ratios` of ``rows``. Each of
    ``costs`` (:func:`~fronde.bench.load_report.served_costs`), ``quarantines``,
    ``ratios`` (:func:`~fronde.bench.load_verdict.ratio_sets`), ``own`` and ``answers``
    (:mod:`~fronde.bench.load_report`) is a section when given. ``screened``: the items
    the run's screen kept out of every block; ``about``: bullets under the title.
    """
    lines = [f"# {title}", "", *[f"- {a}" for a in about], *([""] if about else [])]
    lines += _table(rows)
    lines += _verdict_section(rows, verdict)
    lines += ratio_lines(ratios or {})
    lines += _notes(quarantines, own, answers)
    lines += _spread_section(rows, spread)
    lines += _calibration(costs, curves)
    lines += [
        "",
        f"Looping answers, counted in tok/s and reported apart (items that looped in some "
        f"arm; `loops` and `w/o loops` in the table): {len(loops)}"
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

    ``tab20``'s ten strong colours, then their light pairs (``tab10`` gave ``plain`` and
    ``router-t`` the same blue).
    """
    from matplotlib import colormaps

    tab20 = colormaps["tab20"]  # 20 colours: a strong one, then its light pair
    order = [tab20(i)[:3] for i in (*range(0, 20, 2), *range(1, 20, 2))]
    return {arm: order[i % len(order)] for i, arm in enumerate(arms)}


def load_plot(rows: Sequence[LoadRow], path: Path, title: str) -> None:
    """Throughput and p99 latency against c, one line per arm, into ``path`` (PNG).

    Router arms thick, static ones dashed; the legend right of both panels.
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
        style = {"linewidth": 2.5} if routed(arm) else {"linewidth": 1.2, "linestyle": "--"}
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
