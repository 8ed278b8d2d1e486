# pyright: reportUnknownMemberType=false
# (matplotlib's bundled annotations leave **kwargs untyped on Axes and Figure methods)
"""From battery JSONL to the verdict, PNG charts and a markdown summary.

Figures compare bracketed ratios (a config's decode tok/s over the mean of its two
baseline references), so each comparison is made within one run and drift that
hits both sides cancels. Records from different machines or llama.cpp builds are
refused: their ratios do not compare.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from fronde.bench.stats import Check, verdict
from fronde.errors import FrondeError

__all__ = [
    "Summary",
    "load_records",
    "summarize",
    "verdict_table",
    "write_charts",
    "write_markdown",
]


def load_records(path: Path) -> list[dict[str, Any]]:
    """The successful records of a battery JSONL, the last one per key.

    Raises:
        FrondeError: the file is missing, or mixes machines or llama.cpp builds.
    """
    if not path.is_file():
        raise FrondeError(f"{path} does not exist: run `fronde bench battery` first")
    by_key: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("status") == "ok":
            by_key[rec["key"]] = rec
    recs = list(by_key.values())
    machines = {json.dumps(r.get("machine"), sort_keys=True) for r in recs}
    builds = {r.get("llama_build") for r in recs}
    if len(machines) > 1 or len(builds) > 1:
        raise FrondeError(f"{path} mixes machines or llama.cpp builds; compare runs separately")
    return recs


class Summary:
    """Per-prompt ratios and the verdict of one battery run.

    Attributes:
        prompts: prompt names in run order.
        configs: config names in run order (router last).
        ratio: prompt → config → bracketed ratio over baseline.
        tok_s: prompt → config → client decode tok/s (median).
        alpha: prompt → config → α, where drafting happened.
        content: prompt → content class.
        invalid: keys of cells whose references drifted past the limit twice.
        degenerate: keys of cells whose output loops.
        checks: the invariant checks (empty without router records).
    """

    def __init__(self, records: list[dict[str, Any]]) -> None:
        """Index ``records`` (see :func:`load_records`)."""
        self.prompts: list[str] = list(dict.fromkeys(r["prompt"] for r in records))
        self.configs: list[str] = list(dict.fromkeys(r["config"] for r in records))
        if "router" in self.configs:
            self.configs = [c for c in self.configs if c != "router"] + ["router"]
        self.ratio: dict[str, dict[str, float]] = defaultdict(dict)
        self.tok_s: dict[str, dict[str, float]] = defaultdict(dict)
        self.alpha: dict[str, dict[str, float]] = defaultdict(dict)
        self.content: dict[str, str] = {}
        self.invalid: list[str] = []
        self.degenerate: list[str] = []
        for r in records:
            p, c = r["prompt"], r["config"]
            self.ratio[p][c] = float(r["ratio"])
            self.tok_s[p][c] = float(r["decode_tok_s"])
            if r.get("alpha") is not None:
                self.alpha[p][c] = float(r["alpha"])
            self.content[p] = r["content"]
            if not r.get("valid", True):
                self.invalid.append(r["key"])
            if r.get("degenerate"):
                self.degenerate.append(r["key"])
        # Invalid cells (references drifted twice) and looping outputs are marked in
        # every table but count in no check: a prompt whose router cell is one of them
        # leaves the verdict, and such a static cell is no candidate for "best static".
        excluded = set(self.invalid) | set(self.degenerate)
        router = {
            p: v["router"]
            for p, v in self.ratio.items()
            if "router" in v and f"router|{p}" not in excluded
        }
        # Ratios are already over the baseline references, so baseline itself is 1.0
        # in the verdict; its own cell is an A/A check of the references' noise and
        # would only add that noise to every comparison.
        static = {
            p: {
                c: (1.0 if c == "baseline" else x)
                for c, x in v.items()
                if c != "router" and (c == "baseline" or f"{c}|{p}" not in excluded)
            }
            for p, v in self.ratio.items()
        }
        self.checks: list[Check] = verdict(router, static, self.content) if router else []

    @property
    def passed(self) -> bool:
        """True when there are checks and all pass."""
        return bool(self.checks) and all(c.passed for c in self.checks)


def summarize(path: Path) -> Summary:
    """Load ``path`` and summarize it (see :class:`Summary`)."""
    return Summary(load_records(path))


def _cells(s: Summary, prompt: str, bold: str) -> list[str]:
    """One prompt's ratios as text: the best static in ``bold``, invalid ones starred."""
    best = max((x for c, x in s.ratio[prompt].items() if c != "router"), default=0.0)
    cells: list[str] = []
    for c in s.configs:
        x = s.ratio[prompt].get(c)
        cell = "—" if x is None else f"{x:.2f}"
        if x is not None and c != "router" and x == best:
            cell = bold.format(cell)
        cells.append(cell + ("*" if f"{c}|{prompt}" in s.invalid else ""))
    return cells


def verdict_table(s: Summary) -> tuple[Table, Table]:
    """The ratio table (prompt × config) and the checks table."""
    ratios = Table(title="decode tok/s ÷ baseline (bracketed, median of reps)")
    ratios.add_column("prompt")
    for c in s.configs:
        ratios.add_column(c, justify="right")
    for p in s.prompts:
        ratios.add_row(f"{p} ({s.content[p]})", *_cells(s, p, "[bold]{}[/bold]"))
    ratios.caption = "bold: best static config; *: drifted > 5 % twice (invalid)"
    checks = Table(title="invariants")
    for col in ("check", "value", "bound", ""):
        checks.add_column(col, justify="right" if col in ("value", "bound") else "left")
    for c in s.checks:
        checks.add_row(c.name, f"{c.value:.3f}", f"≥ {c.bound:.2f}", "pass" if c.passed else "FAIL")
    return ratios, checks


def write_charts(s: Summary, folder: Path) -> list[Path]:
    """Write ratio-by-content, tok/s-by-mode and α-by-mode PNGs into ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []

    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(s.configs))
    x = np.arange(len(s.prompts))
    for i, c in enumerate(s.configs):
        ys = [s.ratio[p].get(c, np.nan) for p in s.prompts]
        ax.bar(x + i * width - 0.4 + width / 2, ys, width, label=c)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xticks(x, [f"{p}\n({s.content[p]})" for p in s.prompts], fontsize=8)
    ax.set_ylabel("decode tok/s ÷ baseline")
    ax.set_title("Speed-up by content (bracketed)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    paths.append(folder / "ratio_by_content.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    med = [float(np.nanmedian([s.tok_s[p].get(c, np.nan) for p in s.prompts])) for c in s.configs]
    ax.bar(s.configs, med)
    ax.set_ylabel("median decode tok/s over prompts")
    ax.set_title("Decode tok/s by mode")
    ax.tick_params(axis="x", rotation=45, labelsize=8)
    fig.tight_layout()
    paths.append(folder / "tok_s_by_mode.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    drafting = [c for c in s.configs if any(c in s.alpha[p] for p in s.prompts)]
    alphas = [[s.alpha[p][c] for p in s.prompts if c in s.alpha[p]] for c in drafting]
    if drafting:
        ax.boxplot(alphas, tick_labels=drafting)
    ax.set_ylabel("α = accepted ÷ drafted")
    ax.set_title("Acceptance rate by mode, over prompts")
    ax.tick_params(axis="x", rotation=45, labelsize=8)
    fig.tight_layout()
    paths.append(folder / "alpha_by_mode.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def write_markdown(s: Summary, path: Path, jsonl: Path, extra: str = "") -> Path:
    """Write a markdown summary of ``s`` next to its JSONL."""
    lines = [f"# Battery summary: `{jsonl.name}`", ""]
    lines.append("Decode tok/s ÷ baseline, bracketed (median of reps). **Bold**: best static.")
    lines.append("")
    lines.append("| prompt | " + " | ".join(s.configs) + " |")
    lines.append("|---|" + "---:|" * len(s.configs))
    for p in s.prompts:
        lines.append(f"| {p} ({s.content[p]}) | " + " | ".join(_cells(s, p, "**{}**")) + " |")
    lines += [
        "",
        "\\*: references drifted more than 5 % twice (invalid). "
        f"{len(s.invalid)} invalid and {len(s.degenerate)} looping cells are left out of "
        "the checks below.",
        "",
    ]
    if s.checks:
        lines += ["## Invariants", "", "| check | value | bound | |", "|---|---:|---:|---|"]
        for c in s.checks:
            lines.append(
                f"| {c.name} | {c.value:.3f} | ≥ {c.bound:.2f} | {'pass' if c.passed else 'FAIL'} |"
            )
        lines += ["", f"**VERDICT: {'PASS' if s.passed else 'FAIL'}**", ""]
    if s.degenerate:
        lines += ["Degenerate (looping) outputs: " + ", ".join(f"`{k}`" for k in s.degenerate), ""]
    if extra:
        lines += [extra, ""]
    lines += [
        "Charts: `ratio_by_content.png`, `tok_s_by_mode.png`, `alpha_by_mode.png`.",
        "",
    ]
    path.write_text("\n".join(lines))
    return path
