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
- **Aggregates** and the report live in :mod:`fronde.bench.atlas_report`.

The quantized variants come from the shipped Q4_K_M with
``llama-quantize --allow-requantize``: they are requantizations of a 4-bit
model, not quantizations of full-precision weights, and the report says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fronde.backends.pool import plan_pool
from fronde.backends.process import LaunchSpec, LlamaServerProcess
from fronde.bench.domains import DomainPrompt, prompts_by_domain
from fronde.bench.runner import Run, all_started, bench_client, direct_run, warm_up
from fronde.bench.serve import machine_line, run_info
from fronde.bench.stats import DEGENERATE_SCORE, first_difference, repetition_score
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.runtime.install import find_llama_binary, llama_build_info
from fronde.runtime.local import profile_of
from fronde.runtime.models import model_path

__all__ = [
    "ATLAS_MODES",
    "QUANTIZE_TYPES",
    "QUANT_TYPES",
    "SHIPPED",
    "AtlasOptions",
    "done_prompts",
    "load_atlas",
    "mode_servers",
    "requantize",
    "run_campaign",
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
    profile = profile_of(settings)
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
    async with all_started(procs):
        yield procs


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


def _record(runs: list[Run], base: list[Run]) -> dict[str, Any]:
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
    profile = profile_of(settings)
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
            await warm_up(http, [p.url for p in procs.values()])
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
            **_record(runs[m], runs[Mode.BASELINE]),
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
