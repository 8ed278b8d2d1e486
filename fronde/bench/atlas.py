# pyright: reportUnknownMemberType=false
# (matplotlib's bundled annotations leave **kwargs untyped on Axes and Figure methods)
"""The speculation atlas: α, τ and decode speedup by cognitive domain and quantization.

A campaign runs every mode × prompt of :mod:`fronde.bench.domains` against one
warm llama-server per mode (the same argv `fronde serve` gives each mode), for
the shipped model and for variants that ``llama-quantize`` derives from it.

- **Order.** Per prompt, the modes run ``reps`` times in a rotated order
  (B S M, S M B, …), so a slow drift of the shared machine falls on every mode
  alike. A mode's speedup on a prompt is its median decode tok/s over
  baseline's median on the same prompt, measured in the same rotation.
- **Records.** One JSONL line per (variant, mode, prompt), appended when the
  prompt's rotation is done; ``resume`` skips prompts already complete.
- **Figures per record.** Client-observed decode tok/s (first token excluded),
  α = accepted ÷ drafted, τ = tokens ÷ (tokens − accepted) (mean tokens per
  target step, llama.cpp's timings), whether the output's tokens equal
  baseline's, the first differing token, and the repetition score with its
  degeneration flag (the base model loops, which inflates α).
- **Aggregates.** Per domain × mode: α pooled over prompts (Σ accepted ÷
  Σ drafted) and the geometric-mean speedup, each with a 95 % bootstrap interval
  over the domain's prompts (2,000 resamples, seed 0). Five prompts make wide
  intervals; they are shown, not hidden.

The quantized variants come from the shipped Q4_K_M with
``llama-quantize --allow-requantize``: they are requantizations of a 4-bit
model, not quantizations of full-precision weights, and the report says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import subprocess
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fronde.backends.pool import plan_pool
from fronde.backends.process import LaunchSpec, LlamaServerProcess
from fronde.bench.breakeven import VerifyCosts, break_even_alpha, write_break_even_map
from fronde.bench.domains import DOMAINS, DomainPrompt, prompts_by_domain
from fronde.bench.runner import Run, bench_client, direct_run
from fronde.bench.serve import machine_line, run_info
from fronde.bench.stats import DEGENERATE_SCORE, first_difference, repetition_score
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.runtime.install import find_llama_binary, llama_build_info
from fronde.runtime.models import load_profile, model_path

__all__ = [
    "ATLAS_MODES",
    "QUANTIZE_TYPES",
    "QUANT_TYPES",
    "AtlasOptions",
    "DomainRow",
    "bootstrap_ci",
    "domain_rows",
    "load_atlas",
    "requantize",
    "run_campaign",
    "without_degenerate",
    "write_atlas_report",
]

log = get_logger(__name__)

SCHEMA_VERSION = 1
ATLAS_MODES: tuple[Mode, ...] = (Mode.BASELINE, Mode.NGRAM_SIMPLE, Mode.NGRAM_MOD)
"""The modes a CPU campaign runs (draft needs a draft model sharing the vocabulary)."""
QUANT_TYPES: tuple[str, ...] = ("Q3_K_M", "Q2_K", "Q4_0")
"""llama-quantize types derived from the shipped Q4_K_M by default."""
QUANTIZE_TYPES: tuple[str, ...] = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L",
    "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16",
)  # fmt: skip
"""Types ``--variants`` accepts: llama-quantize's (``tools/quantize/quantize.cpp``) that
need no importance matrix."""
SHIPPED = "Q4_K_M"
"""The variant name of the shipped model file."""


@dataclass(frozen=True)
class AtlasOptions:
    """How much a campaign measures.

    Attributes:
        reps: rotations per prompt (medians are kept).
        max_tokens: tokens per answer, at most (a prompt's stop string may end it sooner).
        domains: domains to run (all when empty).
        per_domain: prompts per domain (all five when None).
        modes: modes to run; baseline is always added.
    """

    reps: int = 2
    max_tokens: int = 64
    domains: tuple[str, ...] = ()
    per_domain: int | None = None
    modes: tuple[Mode, ...] = ATLAS_MODES


def requantize(llama_quantize: Path, source: Path, qtype: str, out_dir: Path) -> Path:
    """Derive a ``qtype`` variant of ``source`` with ``llama-quantize --allow-requantize``.

    The result is a requantization of an already quantized file, not a quantization
    of full-precision weights. An existing output is reused.

    Args:
        llama_quantize: the executable (``fronde install`` builds it).
        source: the shipped GGUF.
        qtype: a llama-quantize type name (``Q3_K_M``, ``Q2_K``, ``Q4_0``…).
        out_dir: where the variant is written (outside the repository).

    Returns:
        The variant's path, ``<source stem>-<qtype>-from-<source type>.gguf``.

    Raises:
        FrondeError: llama-quantize failed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{source.stem}-requant-{qtype}.gguf"
    if out.is_file() and out.stat().st_size > 0:
        return out
    partial = out.with_suffix(".partial")
    done = subprocess.run(
        [str(llama_quantize), "--allow-requantize", str(source), str(partial), qtype],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
        raise FrondeError(f"llama-quantize {qtype} failed ({done.returncode}): {' | '.join(tail)}")
    partial.replace(out)
    return out


@contextlib.asynccontextmanager
async def mode_servers(
    settings: Settings, model: Path, modes: Sequence[Mode], log_dir: Path
) -> AsyncGenerator[dict[Mode, LlamaServerProcess]]:
    """Start one warm llama-server per mode on ``model``, with `fronde serve`'s argv.

    Raises:
        FrondeError: the binary, the profile or a backend could not start.
    """
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    profile = load_profile(settings.models_dir, settings.profile)
    plan = plan_pool(settings.model_copy(update={"modes": list(modes)}), profile, binary, log_dir)
    procs: dict[Mode, LlamaServerProcess] = {}
    for mode in modes:
        spec = plan.specs.get(mode)
        if spec is None:
            raise FrondeError(f"mode {mode} cannot run: {plan.left_out.get(mode, 'not planned')}")
        args = list(spec.args)
        args[args.index("-m") + 1] = str(model)
        procs[mode] = LlamaServerProcess(
            LaunchSpec(mode, binary, args, log_dir / f"atlas-{mode}.log"),
            start_timeout_s=settings.backend.start_timeout_s,
        )
    try:
        await asyncio.gather(*(p.start() for p in procs.values()))
        yield procs
    finally:
        await asyncio.gather(*(p.stop() for p in procs.values()), return_exceptions=True)


def done_prompts(path: Path, variant: str, modes: Sequence[Mode]) -> set[str]:
    """Prompts of ``variant`` that ``path`` holds an ok record for, for every mode."""
    seen: dict[str, set[str]] = {}
    for rec in load_atlas(path):
        if rec.get("variant") == variant and rec.get("status") == "ok":
            seen.setdefault(str(rec["prompt"]), set()).add(str(rec["mode"]))
    wanted = {str(m) for m in modes}
    return {p for p, got in seen.items() if wanted <= got}


def load_atlas(path: Path) -> list[dict[str, Any]]:
    """The records of an atlas JSONL, the last one per key; [] if absent.

    A torn last line (a stop mid-write) is skipped. A key measured twice (a failed
    prompt measured again with ``--resume``) counts once, by its latest record.
    """
    if not path.exists():
        return []
    by_key: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(path.read_text().splitlines()):
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict):
                record: dict[str, Any] = rec  # pyright: ignore[reportUnknownVariableType]
                by_key.pop(str(record.get("key", i)), None)
                by_key[str(record.get("key", i))] = record
    return list(by_key.values())


def _median(values: Sequence[float]) -> float:
    return float(np.median(values)) if values else 0.0


def _record(
    variant: str, mode: Mode, prompt: DomainPrompt, runs: list[Run], base: list[Run]
) -> dict[str, Any]:
    """One (variant, mode, prompt) record from its runs and baseline's."""
    speeds = [r.client_tok_s for r in runs]
    mid = runs[int(np.argsort(speeds)[len(runs) // 2])]
    t = mid.timings
    drafted = int(t.get("draft_n") or 0)
    accepted = int(t.get("draft_n_accepted") or 0)
    n = mid.tokens
    base_tok_s = _median([r.client_tok_s for r in base])
    rep = repetition_score(mid.text)
    diff = first_difference(mid.ids, base[0].ids)
    return {
        "status": "ok",
        "decode_tok_s": round(_median(speeds), 3),
        "baseline_tok_s": round(base_tok_s, 3),
        "speedup": round(_median(speeds) / base_tok_s, 4) if base_tok_s > 0 else None,
        "server_decode_tok_s": t.get("predicted_per_second"),
        "prefill_tok_s": t.get("prompt_per_second"),
        "prompt_n": t.get("prompt_n"),
        "tokens": n,
        "draft_n": drafted,
        "accepted": accepted,
        "alpha": accepted / drafted if drafted else None,
        "tau": n / (n - accepted) if drafted and n > accepted else None,
        "same_as_baseline": diff is None,
        "first_diff": diff,
        "repetition": round(rep, 4),
        "degenerate": rep > DEGENERATE_SCORE,
        "output": mid.text,
        "output_sha256": hashlib.sha256(mid.text.encode()).hexdigest(),
        "runs_tok_s": [round(s, 3) for s in speeds],
    }


async def run_campaign(
    settings: Settings,
    out: Path,
    options: AtlasOptions,
    *,
    variant: str = SHIPPED,
    model: Path | None = None,
    derived_from: str | None = None,
    resume: bool = False,
    progress: Callable[[str], None] = lambda _m: None,
) -> Path:
    """Run every mode × prompt on one model file; append records to ``out`` (JSONL).

    Args:
        settings: binary, profile, models folder and backend settings.
        out: the JSONL file (created or appended to).
        options: repetitions, length, prompt and mode subsets.
        variant: the model variant's name in records (``Q4_K_M`` for the shipped file).
        model: the GGUF to run; the profile's target when None.
        derived_from: for a requantized variant, the type it was derived from.
        resume: skip prompts whose every mode already has an ok record.
        progress: called with one line per finished prompt.

    Returns:
        ``out``.

    Raises:
        FrondeError: a backend could not start.
        ValueError: an unknown domain in ``options.domains``.
    """
    profile = load_profile(settings.models_dir, settings.profile)
    target = model or model_path(settings.models_dir, profile.target)
    modes = (Mode.BASELINE, *(m for m in options.modes if m is not Mode.BASELINE))
    prompts = prompts_by_domain(options.domains, options.per_domain)
    done: set[str] = done_prompts(out, variant, modes) if resume else set()
    out.parent.mkdir(parents=True, exist_ok=True)
    info = run_info() | {"profile": settings.profile, "machine_line": machine_line()}
    log_dir = settings.cache_dir / "logs" / "atlas"  # llama-server logs stay out of results/
    log_dir.mkdir(parents=True, exist_ok=True)
    async with mode_servers(settings, target, modes, log_dir) as procs:
        info["llama_build"] = llama_build_info(procs[Mode.BASELINE].spec.binary)
        async with bench_client() as http:
            warm = [2, 651, 1902, 236761]  # a few gemma tokens: warms pages and threads
            for p in procs.values():
                await direct_run(http, p.url, warm, 4, None)
            for i, prompt in enumerate(prompts):
                if prompt.name in done:
                    continue
                lines = await _one_prompt(
                    http, procs, modes, prompt, i, options, variant, derived_from, target, info
                )
                with out.open("a") as fh:
                    fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in lines)
                progress(_line(lines))
    return out


async def _one_prompt(
    http: httpx.AsyncClient,
    procs: dict[Mode, LlamaServerProcess],
    modes: tuple[Mode, ...],
    prompt: DomainPrompt,
    index: int,
    options: AtlasOptions,
    variant: str,
    derived_from: str | None,
    target: Path,
    info: dict[str, Any],
) -> list[dict[str, Any]]:
    """Measure every mode on one prompt in rotated order; one record per mode."""
    common = {
        "schema_version": SCHEMA_VERSION,
        "variant": variant,
        "derived_from": derived_from,
        "model_file": target.name,
        "prompt": prompt.name,
        "domain": prompt.domain,
        "reps": options.reps,
        "max_tokens": options.max_tokens,
        **info,
    }
    base_url = procs[Mode.BASELINE].url
    try:
        r = await http.post(
            f"{base_url}/tokenize",
            json={"content": prompt.prompt, "add_special": True, "parse_special": True},
        )
        ids = [int(t) for t in r.json()["tokens"]]
        runs: dict[Mode, list[Run]] = {m: [] for m in modes}
        for rep in range(options.reps):
            k = (index + rep) % len(modes)
            for mode in modes[k:] + modes[:k]:
                runs[mode].append(
                    await direct_run(http, procs[mode].url, ids, options.max_tokens, prompt.stop)
                )
    except (FrondeError, httpx.HTTPError, KeyError, ValueError) as exc:
        log.warning("atlas.prompt_failed", prompt=prompt.name, error=str(exc))
        return [
            {
                **common,
                "key": f"{variant}|{m}|{prompt.name}",
                "mode": str(m),
                "status": "failed",
                "error": f"{type(exc).__name__}: {exc}",
            }
            for m in modes
        ]
    return [
        {
            **common,
            "key": f"{variant}|{m}|{prompt.name}",
            "mode": str(m),
            **_record(variant, m, prompt, runs[m], runs[Mode.BASELINE]),
        }
        for m in modes
    ]


def _line(records: list[dict[str, Any]]) -> str:
    first = records[0]
    parts: list[str] = []
    for r in records:
        if r.get("status") != "ok":
            return f"{first['variant']} {first['prompt']}: FAILED {r.get('error')}"
        a = r.get("alpha")
        parts.append(
            f"{r['mode']} {r['decode_tok_s']:.1f}"
            + (f" (×{r['speedup']:.2f}, α {a:.2f})" if r["mode"] != "baseline" and a else "")
        )
    return f"{first['variant']} {first['prompt']}: " + ", ".join(parts)


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
