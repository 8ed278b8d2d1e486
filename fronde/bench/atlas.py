"""The speculation atlas: α, τ and speed by domain and quantization, on the one harness.

Workload A goes to one static llama-server per model-free mode with `fronde serve`'s
argv for it (:func:`atlas_arms`), on the shipped model and on variants that
``llama-quantize --allow-requantize`` derives from it (requantizations of a 4-bit file,
and the page says so); the tables come from :mod:`fronde.bench.report`. With
llama-bench's verify costs the page adds the break-even map.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fronde.bench.arms import Arm
from fronde.bench.blocks import run_plan
from fronde.bench.breakeven import VerifyCosts, break_even_alpha, write_break_even_map
from fronde.bench.protocol import Plan, Progress, Status
from fronde.bench.report import Report
from fronde.bench.serve import run_info
from fronde.bench.store import Store
from fronde.bench.tables import figure
from fronde.bench.verdict import geomean
from fronde.bench.workloads import Workload, load_workload
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.modes import Mode, mode_args
from fronde.runtime.requant import run_llama_quantize

__all__ = [
    "QUANTIZE_TYPES", "SHIPPED", "atlas_arms", "check_quants", "requantize", "run_atlas",
    "write_atlas_page",
]  # fmt: skip

SHIPPED = "Q4_K_M"
"""The shipped quantization of the CPU profile's target."""

QUANTIZE_TYPES: tuple[str, ...] = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L",
    "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16",
)  # fmt: skip
"""Types ``--quant`` accepts: llama-quantize's (``tools/quantize/quantize.cpp``) that need
no importance matrix."""


def check_quants(quants: Sequence[str]) -> None:
    """Refuse a type llama-quantize would not take, before anything is measured.

    Raises:
        FrondeError: the first unknown type, and the known ones.
    """
    for q in quants:
        if q not in QUANTIZE_TYPES:
            raise FrondeError(
                f"--quant {q} is not a llama-quantize type; use one of {', '.join(QUANTIZE_TYPES)}"
            )


WORKLOAD = "first-encounter"


def atlas_arms(settings: Settings) -> tuple[Arm, ...]:
    """One static arm per model-free mode, with the flags `fronde serve` gives it."""
    spec = settings.speculation
    return (
        Arm("base", "static", about="baseline"),
        Arm(
            "simple",
            "static",
            flags=tuple(mode_args(Mode.NGRAM_SIMPLE, spec)),
            about="ngram-simple",
        ),
        Arm("mod", "static", flags=tuple(mode_args(Mode.NGRAM_MOD, spec)), about="ngram-mod"),
    )


def requantize(llama_quantize: Path, source: Path, qtype: str, out_dir: Path) -> Path:
    """``<source stem>-requant-<qtype>.gguf`` in ``out_dir``, made once by llama-quantize.

    Raises:
        FrondeError: llama-quantize failed (its last lines).
    """
    out = out_dir / f"{source.stem}-requant-{qtype}.gguf"
    if out.is_file() and out.stat().st_size > 0:
        return out
    run_llama_quantize(llama_quantize, source, out, qtype)
    return out


async def run_atlas(
    settings: Settings,
    config_file: Path | None,
    out: Path,
    variants: Sequence[tuple[str, Path | None]],
    *,
    reps: int,
    max_tokens: int,
    per_domain: int | None,
    progress: Progress,
    status: Status | None = None,
) -> None:
    """Run one campaign per variant into ``out/<variant>/records.jsonl`` (resumable).

    ``variants``: (name, GGUF) pairs, None for the profile's own target; ``per_domain``:
    prompts per domain (None: all).

    Raises:
        FrondeError: a record file from another variant or budget (``Store.begin``).
    """
    workload: Workload = load_workload(WORKLOAD).first(per_domain)
    for name, model in variants:
        s = settings if model is None else settings.model_copy(update={"model": model})
        plan = Plan.single(workload, atlas_arms(settings), reps, "completion", max_tokens)
        store = Store(out / name / "records.jsonl")
        store.begin({**run_info(), "variant": name}, {"variant": name, "max_tokens": max_tokens})
        await run_plan(plan, s, config_file, store, out / name / "logs", progress, status)


def write_atlas_page(out: Path, variants: Sequence[str], costs: VerifyCosts | None) -> Path:
    """Write each variant's report, the break-even map and ``out/atlas.md``."""
    lines = [
        "# Speculation atlas",
        "",
        f"Variants other than {SHIPPED} are requantized from it (`--allow-requantize`).",
        "",
    ]
    points: list[tuple[float, float, str]] = []
    for name in variants:
        report = Report(Store(out / name / "records.jsonl").samples(), WORKLOAD, "-")
        report.write(out / name)
        lines += [f"- [{name}]({name}/summary.md)"]
        t = report.a
        if name != SHIPPED or not t.items or "base" not in t.arms:
            continue
        for arm in ("simple", "mod"):
            for domain in sorted(set(t.items.values())):
                items = [i for i, d in t.items.items() if d == domain]
                alphas = [s["alpha"] for i in items for s in t.runs[arm][i].values() if s["alpha"]]
                if alphas:
                    speed = geomean([t.speed(arm, i) / t.speed("base", i) for i in items])
                    points.append((sum(alphas) / len(alphas), speed, arm))
    if costs is not None:
        png = write_break_even_map(costs, points, out / "break-even.png", costs.machine)
        gammas = [g for g in (1, 2, 4, 8, 16, 32) if g + 1 in costs.ks]
        lines += [
            "",
            f"## Break-even (verify costs by llama-bench at depth {costs.depth})",
            "",
            "| γ | " + " | ".join(str(g) for g in gammas) + " |",
            "|---|" + "---:|" * len(gammas),
            "| break-even α | "
            + " | ".join(figure(break_even_alpha(costs, g)) for g in gammas)
            + " |",
            "",
            f"![break-even map]({png.name})",
        ]
    page = out / "atlas.md"
    page.write_text("\n".join(lines) + "\n")
    return page
