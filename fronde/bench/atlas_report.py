# pyright: reportUnknownMemberType=false
# (matplotlib's bundled annotations leave **kwargs untyped on Axes and Figure methods)
"""The atlas's statistics and report: from ``atlas.jsonl`` to tables, PNGs and ``atlas.md``.

- Per domain × mode (× variant): α pooled over prompts (Σ accepted ÷ Σ drafted) and
  the geometric-mean speedup, each with a 95 % percentile-bootstrap interval over the
  domain's prompts (2,000 resamples, seed 0).
- Prompts where any mode looped (repetition score above
  :data:`~fronde.bench.stats.DEGENERATE_SCORE`) are also shown dropped, because an
  n-gram draft copies a loop perfectly.
- With ``verify-cost.json``, the break-even map of :mod:`fronde.bench.breakeven`
  and the break-even α per draft length.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fronde.bench.atlas import SHIPPED, load_atlas
from fronde.bench.breakeven import VerifyCosts, break_even_alpha, write_break_even_map
from fronde.bench.domains import DOMAINS
from fronde.bench.stats import DEGENERATE_SCORE
from fronde.errors import FrondeError

__all__ = [
    "DomainRow",
    "bootstrap_ci",
    "domain_rows",
    "without_degenerate",
    "write_atlas_report",
]


# --- aggregation ----------------------------------------------------------------------------


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[np.ndarray], float],
    *,
    weights: Sequence[float] | None = None,
    n: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of ``stat`` over resampled ``values``.

    With ``weights``, ``stat`` gets a 2×m array (values; weights), resampled in pairs
    (for pooled ratios such as Σ accepted ÷ Σ drafted).

    Returns:
        (low, high); (nan, nan) for fewer than two values.
    """
    if len(values) < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    data = np.asarray(values, dtype=float)
    stack = data if weights is None else np.vstack([data, np.asarray(weights, dtype=float)])
    m = data.size
    stats: list[float] = []
    for _ in range(n):
        idx = rng.integers(0, m, m)
        stats.append(stat(stack[..., idx]))
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return (float(lo), float(hi))


@dataclass(frozen=True)
class DomainRow:
    """One domain × mode (× variant) aggregate.

    Attributes:
        domain, mode, variant: the cell.
        prompts: prompts with an ok record.
        alpha: Σ accepted ÷ Σ drafted over the prompts, or None if nothing was drafted.
        alpha_ci: its 95 % bootstrap interval over prompts.
        tau: mean τ over prompts that drafted, or None.
        speedup: geometric mean of the prompts' speedups over baseline.
        speedup_ci: its 95 % bootstrap interval over prompts.
        identical: share of prompts whose output tokens equal baseline's.
        degenerate: prompts whose output was flagged degenerate.
        tok_s: median decode tok/s over the prompts.
    """

    domain: str
    mode: str
    variant: str
    prompts: int
    alpha: float | None
    alpha_ci: tuple[float, float]
    tau: float | None
    speedup: float
    speedup_ci: tuple[float, float]
    identical: float
    degenerate: int
    tok_s: float


def _geomean(a: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(a))))


def _pooled(a: np.ndarray) -> float:
    return float(a[0].sum() / a[1].sum()) if a[1].sum() > 0 else math.nan


def without_degenerate(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of prompts where no mode's output was flagged degenerate (per variant).

    The base model's loops are copied perfectly by n-gram drafts, so a looping
    prompt shows a high α and speedup that say nothing about useful text.
    """
    looped = {(r["variant"], r["prompt"]) for r in records if r.get("degenerate")}
    return [r for r in records if (r.get("variant"), r.get("prompt")) not in looped]


def domain_rows(
    records: Sequence[dict[str, Any]], variant: str = SHIPPED, by: str = "domain"
) -> list[DomainRow]:
    """Aggregate ok records of ``variant`` per ``by`` (``domain``, or ``all``) × mode.

    Rows come in :data:`~fronde.bench.domains.DOMAINS` order, modes in record order.
    """
    ok = [r for r in records if r.get("status") == "ok" and r.get("variant") == variant]
    modes = list(dict.fromkeys(str(r["mode"]) for r in ok))
    groups = list(DOMAINS) if by == "domain" else ["all"]
    rows: list[DomainRow] = []
    for group in groups:
        for mode in modes:
            cell = [
                r
                for r in ok
                if r["mode"] == mode and (group == "all" or r["domain"] == group)
                if r.get("speedup")
            ]
            if not cell:
                continue
            speed = [float(r["speedup"]) for r in cell]
            acc = [float(r["accepted"]) for r in cell]
            drafted = [float(r["draft_n"]) for r in cell]
            taus = [float(r["tau"]) for r in cell if r.get("tau") is not None]
            rows.append(
                DomainRow(
                    domain=group,
                    mode=mode,
                    variant=variant,
                    prompts=len(cell),
                    alpha=sum(acc) / sum(drafted) if sum(drafted) > 0 else None,
                    alpha_ci=bootstrap_ci(acc, _pooled, weights=drafted)
                    if sum(drafted) > 0
                    else (math.nan, math.nan),
                    tau=float(np.mean(taus)) if taus else None,
                    speedup=_geomean(np.asarray(speed)),
                    speedup_ci=bootstrap_ci(speed, _geomean),
                    identical=sum(bool(r["same_as_baseline"]) for r in cell) / len(cell),
                    degenerate=sum(bool(r["degenerate"]) for r in cell),
                    tok_s=float(np.median([r["decode_tok_s"] for r in cell])),
                )
            )
    return rows


# --- the report -----------------------------------------------------------------------------


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _ci(ci: tuple[float, float]) -> str:
    return "" if math.isnan(ci[0]) else f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def _domain_markdown(rows: list[DomainRow]) -> list[str]:
    lines = [
        "| domain | mode | prompts | decode tok/s | speedup [95 % CI] | α [95 % CI] | τ "
        "| identical to baseline | degenerate |",
        "|---|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        speed = "1.00" if r.mode == "baseline" else f"{r.speedup:.2f}{_ci(r.speedup_ci)}"
        alpha = "-" if r.alpha is None else f"{r.alpha:.2f}{_ci(r.alpha_ci)}"
        same = "-" if r.mode == "baseline" else f"{r.identical * 100:.0f} %"
        lines.append(
            f"| {r.domain} | {r.mode} | {r.prompts} | {r.tok_s:.1f} | {speed} | {alpha} "
            f"| {_f(r.tau)} | {same} | {r.degenerate} |"
        )
    return lines


def _write_domain_plot(rows: list[DomainRow], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in dict.fromkeys(r.mode for r in rows) if m != "baseline"]
    domains = [d for d in DOMAINS if any(r.domain == d for r in rows)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    x = np.arange(len(domains))
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        cells = {r.domain: r for r in rows if r.mode == mode}
        ys = np.array([cells[d].speedup if d in cells else np.nan for d in domains])
        lo = np.array([cells[d].speedup_ci[0] if d in cells else np.nan for d in domains])
        hi = np.array([cells[d].speedup_ci[1] if d in cells else np.nan for d in domains])
        err = np.vstack([np.nan_to_num(ys - lo), np.nan_to_num(hi - ys)])
        pos = x + i * width - 0.4 + width / 2
        top.bar(pos, ys, width, yerr=err, capsize=3, label=mode)
        alphas = [
            cells[d].alpha if d in cells and cells[d].alpha is not None else np.nan for d in domains
        ]
        bottom.bar(pos, alphas, width, label=mode)
    top.axhline(1.0, color="black", linewidth=1)
    for xi, d in zip(x, domains, strict=True):
        cells = [r for r in rows if r.domain == d]
        looped = max(r.degenerate for r in cells)
        if looped:  # the base model looped: α and speedup there reflect the loop
            top.annotate(
                f"loops {looped}/{cells[0].prompts}",
                (float(xi), 1.0),
                xytext=(0, -14),
                textcoords="offset points",
                ha="center",
                fontsize=7,
                color="darkred",
            )
    top.set_ylabel("decode speedup (× baseline)\ngeomean, 95 % CI")
    top.legend(fontsize=8)
    top.set_title(title)
    bottom.set_ylabel("α = accepted ÷ drafted")
    bottom.set_ylim(0, 1)
    bottom.set_xticks(x, domains, rotation=30, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _quant_rows(records: Sequence[dict[str, Any]]) -> list[DomainRow]:
    """Per variant × mode over the prompts every variant ran (a like-for-like set)."""
    ok = [r for r in records if r.get("status") == "ok"]
    variants = list(dict.fromkeys(str(r["variant"]) for r in ok))
    per_variant = [{str(r["prompt"]) for r in ok if r["variant"] == v} for v in variants]
    shared: set[str] = set[str].intersection(*per_variant) if per_variant else set[str]()
    rows: list[DomainRow] = []
    for v in variants:
        same = [r for r in ok if r["variant"] == v and r["prompt"] in shared]
        rows += domain_rows(same, v, by="all")
    return rows


def write_atlas_report(folder: Path, tag: str, commands: Sequence[str] = ()) -> list[Path]:
    """Write ``atlas.md`` and the PNGs from ``folder``'s ``atlas.jsonl`` and ``verify-cost.json``.

    Files: ``atlas-domains-<tag>.png`` (speedup and α by domain),
    ``break-even-<tag>.png`` (the map, when verify costs exist), ``atlas.md``.

    Args:
        folder: the campaign's folder.
        tag: the machine's short name in file names (``cpu``, ``gpu-h200``).
        commands: the commands that produced the files, quoted in the page.

    Returns:
        The files written.

    Raises:
        FrondeError: no ok record in ``atlas.jsonl``.
    """
    records = load_atlas(folder / "atlas.jsonl")
    ok = [r for r in records if r.get("status") == "ok"]
    if not ok:
        raise FrondeError(f"{folder / 'atlas.jsonl'} holds no successful record: run the campaign")
    first = ok[0]
    written: list[Path] = []
    rows = domain_rows(records, SHIPPED)
    overall = domain_rows(records, SHIPPED, by="all")
    machine = first.get("machine_line") or first.get("machine", "?")
    lines = [
        f"# Speculation atlas: {tag}",
        "",
        f"Machine: {machine}. llama.cpp: {first.get('llama_build')}. Profile "
        f"{first.get('profile')}, model `{first.get('model_file')}`. Commit "
        f"{str(first.get('commit'))[:10]}. {first.get('reps')} rotation(s) of the modes per "
        "prompt, at most "
        f"{first.get('max_tokens')} tokens. Decode tok/s as the client saw it (first token "
        "excluded); speedup = a mode's median ÷ baseline's median on the same prompt, geometric "
        "mean over the domain's prompts; α = Σ accepted ÷ Σ drafted; τ = tokens ÷ (tokens − "
        "accepted). Intervals: 95 % bootstrap over the domain's prompts (five prompts: wide). "
        "'Identical to baseline': the mode's output tokens equal baseline's; greedy decoding "
        "is not bit-identical across modes here (a verify batch and a decode step round "
        "differently), so a mode may take another path after a near-tie.",
        "",
    ]
    if commands:
        lines += ["Regenerate:", "", "```", *commands, "```", ""]
    failed = [r for r in records if r.get("status") != "ok"]
    if failed:
        lines += [f"Failed records: {len(failed)} (kept in the JSONL with their error).", ""]
    lines += ["## By domain (shipped Q4_K_M)", "", *_domain_markdown(rows), ""]
    clean = domain_rows(without_degenerate(records), SHIPPED)
    clean_all = domain_rows(without_degenerate(records), SHIPPED, by="all")
    lines += ["## All domains", "", *_domain_markdown(overall), ""]
    lines += [
        "## Without degenerate outputs",
        "",
        "The base model often loops, and n-gram drafts copy a loop perfectly: such a "
        "prompt shows α near 1 and a large speedup on text nobody wants. These tables "
        "drop every prompt where any mode's output was flagged degenerate (repetition "
        f"score > {DEGENERATE_SCORE}). Read the domain rows above with this in mind.",
        "",
        "### All domains",
        "",
        *_domain_markdown(clean_all),
        "",
        "### By domain (a domain whose every prompt looped has no row)",
        "",
        *_domain_markdown(clean),
        "",
    ]
    if rows:
        written.append(
            _write_domain_plot(
                rows,
                folder / f"atlas-domains-{tag}.png",
                f"Speculation by domain, {tag}: gemma-3-270m {SHIPPED}",
            )
        )
        lines += [f"![speedup and α by domain]({written[-1].name})", ""]
    variants = list(dict.fromkeys(str(r["variant"]) for r in ok))
    if len(variants) > 1:
        q = _quant_rows(records)
        lines += [
            "## Quantization",
            "",
            f"The variants other than {SHIPPED} were made by `llama-quantize "
            f"--allow-requantize` from the shipped {SHIPPED} file. They are requantizations "
            "of a 4-bit model, not quantizations of full-precision weights: what they show "
            "is the effect of losing more precision on top of Q4_K_M. Rows are over the "
            "prompts every variant ran.",
            "",
            "| variant | mode | prompts | decode tok/s | speedup [95 % CI] | α [95 % CI] | τ "
            "| identical to baseline | degenerate |",
            "|---|---|---:|---:|---|---|---:|---:|---:|",
            *(
                line.replace(f"| all | {r.mode} |", f"| {r.variant} | {r.mode} |", 1)
                for r, line in zip(q, _domain_markdown(q)[2:], strict=True)
            ),
            "",
        ]
    costs_path = folder / "verify-cost.json"
    if costs_path.is_file():
        costs = VerifyCosts.from_json(json.loads(costs_path.read_text()))
        points = [
            (float(r["alpha"]), float(r["speedup"]), str(r["mode"]))
            for r in ok
            if r["variant"] == SHIPPED and r.get("alpha") is not None and r.get("speedup")
        ]
        written.append(
            write_break_even_map(
                costs,
                points,
                folder / f"break-even-{tag}.png",
                f"Break-even map, {tag}: {costs.machine}",
            )
        )
        shown = [k for k in (1, 2, 4, 8, 16, 32, 64) if k in costs.ks]
        gammas = [g for g in (1, 2, 4, 8, 16, 32) if g + 1 in costs.ks]
        lines += [
            "## Verify cost and the break-even map",
            "",
            f"One target batch of k tokens at depth {costs.depth}, timed by llama-bench "
            f"(`{costs.command}`). r(k) = T(k) ÷ T(1): verifying k − 1 drafts costs r(k) "
            "decode steps. Expected speedup S = (1 − β^(γ+1)) ÷ ((1 − β)·r(γ + 1)) "
            "(Leviathan et al. 2023, Theorem 3.8, with the measured verify cost; c = 0 "
            "for n-gram drafts), drawn against α = accepted ÷ drafted = "
            "β(1 − β^γ) ÷ ((1 − β)γ). The measured points are the campaign's prompts.",
            "",
            "| k | " + " | ".join(str(k) for k in shown) + " |",
            "|---|" + "---:|" * len(shown),
            "| ms | "
            + " | ".join(f"{costs.seconds[costs.ks.index(k)] * 1e3:.2f}" for k in shown)
            + " |",
            "| r(k) | " + " | ".join(f"{costs.ratio(k):.2f}" for k in shown) + " |",
            "",
            "Break-even: the smallest α at which drafting γ tokens every step pays (S ≥ 1), "
            "from the model above:",
            "",
            "| γ | " + " | ".join(str(g) for g in gammas) + " |",
            "|---|" + "---:|" * len(gammas),
            "| break-even α | " + " | ".join(_f(break_even_alpha(costs, g)) for g in gammas) + " |",
            "",
            f"![break-even map]({written[-1].name})",
            "",
        ]
    page = folder / "atlas.md"
    page.write_text("\n".join(lines))
    written.append(page)
    return written
