# pyright: reportUnknownMemberType=false
# (matplotlib's bundled annotations leave **kwargs untyped on Axes and Figure methods)
"""The report: from a store's samples to 80-column tables, PNG charts and ``summary.md``.

Every table says how many items were left out as invalid or looping, and which.
Routing decisions (``x-fronde-class`` → ``x-fronde-mode`` of each routed request)
are counted per domain.
"""

from __future__ import annotations

import io
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from statistics import median
from typing import Any, cast

from rich.console import Console
from rich.table import Table as RichTable

from fronde.bench.answer import answer_lines
from fronde.bench.arms import ARMS
from fronde.bench.store import Store
from fronde.bench.tables import figure, fitted_table
from fronde.bench.verdict import (
    DRIFT_WARN,
    Check,
    Table,
    best_static,
    bootstrap,
    checks,
    first_difference,
    geomean,
    table,
    verdict_of,
)

__all__ = ["Report", "build_report", "prediction_errors"]

_ABOUT = {a.name: a.about for a in ARMS}


def _legend(arms: Iterable[str]) -> str:
    """``arms: base = Fronde, baseline forced; ...``: what serves each arm of a table."""
    return "arms: " + "; ".join(f"{a} = {_ABOUT[a]}" if a in _ABOUT else a for a in arms)


def prediction_errors(samples: Iterable[dict[str, Any]]) -> list[float]:
    """|predicted ÷ actual − 1| of each routed sample that carried a prediction.

    The prediction is the ``x-fronde-predicted-tok-s`` header (the counterfactual
    book's forecast for the chosen mode, made before generating); the actual is the
    backend's decode tok/s (``timings.predicted_per_second``).
    """
    out: list[float] = []
    for s in samples:
        route = cast("dict[str, str]", s.get("route") or {})
        timings = cast("dict[str, float]", s.get("timings") or {})
        raw, actual = route.get("predicted-tok-s"), timings.get("predicted_per_second")
        if raw is not None and actual:
            out.append(abs(float(raw) / float(actual) - 1.0))
    return out


def _decision(sample: dict[str, Any]) -> str:
    """``class→mode`` of a routed sample; a probe that lost names both modes.

    The ``x-fronde-mode`` header is sent before a probe ends, so it names the probed
    mode; the answer's ``fronde`` report names the mode that finished it.
    """
    route: dict[str, str] = sample.get("route") or {}
    report: dict[str, Any] = sample.get("fronde") or {}
    mode = report.get("mode") or route.get("mode")
    probed = report.get("probed")
    lost = f" ({probed} lost)" if probed and probed != mode else ""
    return f"{route.get('class')}→{mode}{lost}"


class Report:
    """Tables, checks and charts of one store's samples (workload A, and B if present)."""

    def __init__(
        self,
        samples: Sequence[dict[str, Any]],
        first: str,
        session: str,
        blocks: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.blocks = [b for b in blocks if b.get("workload") == first and b.get("router")]
        self.a = table(samples, first)
        self.b = table(samples, session)
        routers = [x for x in self.a.arms if x.startswith("router")]
        reachable = [a.name for a in ARMS if a.reachable and a.name in self.a.arms]
        self.checks: list[Check] = []
        if "base" in self.a.arms:
            for r in routers:
                self.checks += checks(self.a, r, "base", reachable)

    @property
    def verdict(self) -> str | None:
        """``PASS`` or ``FAIL``; None without a routed arm and a baseline (nothing to judge)."""
        return verdict_of(self.checks)

    def _left_out(self, t: Table) -> str:
        loops = ", ".join(
            f"{i} ({'all arms' if len(a) == len(t.arms) else '/'.join(a)})"
            for i, a in t.looping.items()
        )
        return (
            f"{len(t.items)} items counted; invalid {len(t.invalid)}"
            + (f" ({', '.join(t.invalid)})" if t.invalid else "")
            + f"; looping {len(t.looping)}"
            + (f": {loops}" if loops else "")
        )

    def _drift(self, t: Table) -> str:
        """One line: each arm's drift between repetitions, the suspect ones marked."""
        drifts = {a: t.drift(a) for a in t.arms}
        bad = [a for a, d in drifts.items() if abs(d - 1.0) > DRIFT_WARN]
        line = "drift, total rate of a later ÷ the first repetition: " + ", ".join(
            f"{a} {d:.2f}{'!' if a in bad else ''}" for a, d in drifts.items()
        )
        if bad:
            line += (
                f". ! beyond ±{DRIFT_WARN:.0%}: the machine's speed changed during the run;"
                " figures with those arms are suspect (rerun on a quiet machine)"
            )
        return line

    def arms_table(self, t: Table, title: str) -> RichTable:
        """Per arm: total rate, ×baseline (geomean, 95 % CI), α, share of texts equal to base's."""
        tab = fitted_table(
            title,
            ("arm", "Σ tok/s", "× base", "95 % CI", "α", "same", "differs at"),
            left={"arm"},
            caption="Σ tok/s: all tokens ÷ all seconds; × base: geometric mean over prompts of"
            " the per-prompt ratio; same: answers identical to base's; differs at: median"
            " first differing character",
        )
        for arm in t.arms:
            if not t.items:
                break
            r = t.ratios(arm, "base") if "base" in t.arms else []
            lo, hi = bootstrap([[x] for x in r])
            alphas = [
                s["alpha"]
                for i in t.items
                for s in t.runs[arm][i].values()
                if s["alpha"] is not None
            ]
            tab.add_row(
                arm,
                figure(t.total(arm), 1),
                figure(geomean(r)) if r else "-",
                f"{figure(lo)}–{figure(hi)}",
                figure(sum(alphas) / len(alphas)) if alphas else "-",
                *self._same(t, arm),
            )
        return tab

    def _same(self, t: Table, arm: str) -> tuple[str, str]:
        """Texts equal to base's (same item and repetition); median first differing character."""
        if "base" not in t.arms:
            return "-", "-"
        firsts = [
            first_difference(s["text"], t.runs["base"][i][rep]["text"])
            for i in t.items
            for rep, s in t.runs[arm][i].items()
            if rep in t.runs["base"][i]
        ]
        differ = sorted(x for x in firsts if x is not None)
        at = str(differ[len(differ) // 2]) if differ else "-"
        return f"{len(firsts) - len(differ)}/{len(firsts)}", at

    def domain_table(self) -> RichTable:
        """Per domain: each routed arm and the best static arm ÷ baseline (geomean)."""
        t = self.a
        if not t.items or "base" not in t.arms:
            return RichTable(title="A, per domain: no valid item or no base arm")
        cols = [*(a for a in t.arms if a.startswith("router")), best_static(t)]
        title = "A, per domain: × base (geomean, 95 % CI)"
        tab = fitted_table(title, ("domain", "n", *cols), left={"domain"})
        ratios = {c: t.by_domain(c, "base") for c in cols}
        for d, first in ratios[cols[0]].items():
            cells: list[str] = []
            for c in cols:
                lo, hi = bootstrap([[x] for x in ratios[c][d]])
                ci = f"{figure(lo)}–{figure(hi)}" if not math.isnan(lo) else "(n=1)"
                cells.append(f"{geomean(ratios[c][d]):.2f} {ci}")
            tab.add_row(d, str(len(first)), *cells)
        return tab

    def routes_table(self) -> RichTable:
        """Per domain and routed arm: class → mode counts over all reps; lost probes named."""
        title = "A, routing decisions (class→mode: count)"
        cols = ("domain", "arm", "decisions")
        tab = fitted_table(title, cols, left=cols)
        t = self.a
        for arm in (a for a in t.arms if a.startswith("router")):
            by_domain: dict[str, Counter[str]] = defaultdict(Counter)
            for runs in t.runs[arm].values():
                for s in runs.values():
                    by_domain[s["domain"]][_decision(s)] += 1
            for d, counts in by_domain.items():
                tab.add_row(d, arm, ", ".join(f"{k}: {v}" for k, v in counts.most_common()))
        for arm in dict.fromkeys(b["arm"] for b in self.blocks):
            collapses: Counter[str] = Counter()
            held: list[str] = []
            for b in (b for b in self.blocks if b["arm"] == arm):
                for mode, m in b["router"]["modes"].items():
                    collapses[mode] += m.get("collapses") or 0
                    held += [mode] if m.get("quarantined_for_s") else []
            text = ", ".join(f"{m} {n}" for m, n in collapses.items()) or "none"
            tab.add_row(
                "(all)",
                arm,
                f"collapses: {text}; quarantined at a block's end: " + (", ".join(held) or "none"),
            )
        for arm in (a for a in t.arms if a.startswith("router")):
            errors = prediction_errors(s for runs in t.runs[arm].values() for s in runs.values())
            if errors:
                tab.add_row(
                    "(all)",
                    arm,
                    f"predicted ÷ actual decode tok/s − 1, chosen mode: median |error| "
                    f"{median(errors):.3f} over {len(errors)} predicted requests",
                )
        return tab

    def session_table(self) -> RichTable:
        """Workload B per arm: wall seconds per repetition (median), ms per generated token."""
        t = self.b
        cols = ("arm", "wall s", "ms/tok", "time ÷ router")
        tab = fitted_table("B, agent sessions", cols, left={"arm"})
        ref = 1000.0 / t.total("router") if "router" in t.arms and t.items else math.nan
        for arm in t.arms:
            if not t.items:
                break
            walls = [sum(t.runs[arm][i][r]["wall_s"] for i in t.items) for r in t.reps]
            ms = 1000.0 / t.total(arm)
            tab.add_row(
                arm, figure(sorted(walls)[len(walls) // 2], 1), figure(ms, 1), figure(ms / ref)
            )
        return tab

    def checks_table(self) -> RichTable:
        """The verdict's checks, each with its value, interval, bound and result."""
        cols = ("check", "value", "95 % CI", "bound", "")
        tab = fitted_table("Verdict (workload A)", cols, left={"check"})
        for c in self.checks:
            ci = f"{figure(c.low)}–{figure(c.high)}" if not math.isnan(c.low) else ""
            result = "ok" if c.passed else "FAIL" if c.measured else "n/a"
            tab.add_row(c.name, figure(c.value, 3), ci, f"≥ {c.bound:.2f}", result)
        return tab

    def show(self, console: Console) -> None:
        """Print every table, then the answer in words (:mod:`fronde.bench.answer`), last."""
        if self.a.arms:
            console.print(self.arms_table(self.a, "A, first encounter: arms"))
            console.print(_legend(self.a.arms), style="dim", markup=False, highlight=False)
            console.print(self._left_out(self.a), style="dim")
            if len(self.a.reps) > 1 and self.a.items:
                console.print(self._drift(self.a))
            console.print(self.domain_table())
            console.print(self.routes_table())
            console.print(self.checks_table())
        if self.b.arms:
            console.print(self.session_table())
            console.print(self._left_out(self.b), style="dim")
        skipped = [c for c in self.checks if not c.measured and c.name.startswith("(b)")]
        if skipped:
            console.print(
                f"n/a: {len(skipped)} domain check(s) with fewer than 2 valid items, not counted",
                style="dim",
            )
        console.print()
        *lines, last = answer_lines(self.a, self.b, self.checks, _ABOUT)
        for line in lines:
            console.print(line, markup=False, highlight=False)
        console.print(last, style="bold", markup=False, highlight=False)

    def write(self, folder: Path) -> None:
        """Write ``summary.md`` (the tables as text, the arms' legend) and the charts."""
        console = Console(record=True, width=80, file=io.StringIO())
        self.show(console)
        legend = "\n".join(f"- `{a}`: {_ABOUT.get(a, '')}" for a in self.a.arms or self.b.arms)
        text = console.export_text()
        (folder / "summary.md").write_text(
            f"# Benchmark summary\n\n```\n{text}```\n\nArms:\n{legend}\n"
        )
        _charts(self, folder)


def _charts(rep: Report, folder: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = rep.a
    if t.items and "base" in t.arms:
        counts = {d: len(r) for d, r in t.by_domain("base", "base").items()}
        domains = [f"{d} (n={n})" for d, n in counts.items()]
        fig, ax = plt.subplots(figsize=(11, 4.5))
        width = 0.8 / len(t.arms)
        for k, arm in enumerate(t.arms):
            ys = [geomean(r) for r in t.by_domain(arm, "base").values()]
            ax.bar([x + k * width for x in range(len(domains))], ys, width, label=arm)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + 0.4 for x in range(len(domains))], domains, rotation=30, ha="right")
        ax.set_ylabel("end-to-end tok/s ÷ base (geomean)")
        ax.set_title(
            f"A: {len(t.items)} items; {len(t.invalid)} invalid, {len(t.looping)} looping left out"
        )
        # Outside the axes: every bar reaches about 1.0, so any corner inside hides some.
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        fig.tight_layout()
        fig.savefig(folder / "first-encounter.png", dpi=120)
        plt.close(fig)
    b = rep.b
    if b.items:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.bar(b.arms, [1000.0 / b.total(a) for a in b.arms])
        ax.set_ylabel("ms per generated token (lower is faster)")
        ax.set_title(
            f"B: {len(b.items)} steps; {len(b.invalid)} invalid, {len(b.looping)} looping left out"
        )
        fig.tight_layout()
        fig.savefig(folder / "agent-sessions.png", dpi=120)
        plt.close(fig)


def build_report(store: Store) -> Report:
    """The report of a store holding the shipped workloads' samples and blocks."""
    blocks = [r for r in store.records() if r["type"] == "block" and r["ok"]]
    return Report(store.samples(), "first-encounter", "agent-sessions", blocks)
