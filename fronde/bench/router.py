"""The router against every static mode, prompt by prompt, in one bracketed run.

For each prompt: a baseline reference, then each static mode (forced) and the
router (unforced, first encounter: the probe's cost is included), interleaved
over ``reps`` repetitions, then the baseline reference again. A drift of the two
references above ``DRIFT_LIMIT`` reruns the prompt once, then marks it invalid
(the original FRONDE protocol). Every figure is the client-observed streamed
decode tok/s, (tokens − 1) ÷ (last chunk − first chunk): a mid-answer hand-over
to the floor, with its prefill, falls inside that span and is paid for.

Each router repetition changes ``seed`` (ignored at temperature 0) so that it
misses the prompt-hash cache and probes again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from pydantic import BaseModel
from rich.table import Table

from fronde.bench.battery import BATTERY
from fronde.bench.serve import RunInfo, run_info, running_serve
from fronde.bench.stream import collect_completion
from fronde.config import Settings

__all__ = [
    "ROUTER_PROMPTS",
    "PromptResult",
    "RouterReport",
    "format_router_table",
    "run_router_bench",
]

DRIFT_LIMIT = 0.05
"""Baseline drift between the two references that triggers a rerun (original FRONDE)."""

ROUTER_PROMPTS: dict[str, str] = {
    short: next(p.prompt for p in BATTERY if p.name == name)
    for short, name in (
        ("code", "code"),
        ("prose", "prose-en"),
        ("math", "math"),
        ("json", "json"),
        ("edit", "edit-bugfix"),
    )
}
"""Five of the battery's prompts (:mod:`fronde.bench.battery`): four generations, one edit."""


class PromptResult(BaseModel):
    """Medians for one prompt (decode tok/s, client-observed)."""

    prompt: str
    tok_s: dict[str, float]
    router_classes: list[str]
    router_modes: list[str]
    router_over_baseline: float
    router_over_best_static: float
    best_static: str
    drift: float
    valid: bool


class RouterReport(RunInfo):
    """A versioned record of one run of :func:`run_router_bench`."""

    profile: str
    max_tokens: int
    reps: int
    results: list[PromptResult]
    samples: list[dict[str, Any]]


def run_router_bench(
    settings: Settings, config_file: Path | None, *, max_tokens: int = 192, reps: int = 3
) -> RouterReport:
    """Run the bracketed router-vs-static benchmark over :data:`ROUTER_PROMPTS`.

    Raises:
        FrondeError: `fronde serve` did not come up, or a request failed.
    """
    info = run_info()
    results: list[PromptResult] = []
    samples: list[dict[str, Any]] = []
    with (
        running_serve(config_file, settings.backend.start_timeout_s + 30) as serve,
        httpx.Client(timeout=httpx.Timeout(900.0, connect=5.0)) as http,
    ):
        base = serve.base_url
        statics = [
            m for m in ("baseline", "ngram-simple", "ngram-mod", "draft") if m in serve.backend_urls
        ]
        url = f"{base}/v1/completions"

        def run(prompt: str, mode: str | None, seed: int, name: str, rep: int) -> float:
            body = {
                "prompt": prompt,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "seed": seed,
                "stream": True,
            }
            headers = {"x-fronde-mode": mode} if mode else {}
            r = collect_completion(http, url, body, headers)
            samples.append(
                {
                    "prompt": name,
                    "rep": rep,
                    "arm": mode or "router",
                    "client_tok_s": r.client_tok_s(),
                    "server_tok_s": r.timings.get("predicted_per_second"),
                    "tokens": r.timings.get("predicted_n"),
                    "mode": r.mode,
                    "route": r.route,
                    "output_sha256": hashlib.sha256(r.text.encode()).hexdigest(),
                    "output_head": r.text[:160],
                    "fronde": r.fronde,
                }
            )
            return r.client_tok_s()

        # Warm-up: one short neutral request per mode (pages, threads).
        for m in statics:
            run("Hello.", m, 0, "warmup", -1)
        samples.clear()
        seed = 1000
        for name, prompt in ROUTER_PROMPTS.items():
            for attempt in (1, 2):
                before = [run(prompt, "baseline", 42, name, -1) for _ in range(2)]
                arms: dict[str, list[float]] = {a: [] for a in [*statics, "router"]}
                classes: list[str] = []
                modes: list[str] = []
                for rep in range(reps):
                    order = [*statics, "router"]
                    if rep % 2:
                        order.reverse()
                    for arm in order:
                        if arm == "router":
                            seed += 1
                            arms[arm].append(run(prompt, None, seed, name, rep))
                            classes.append(samples[-1]["route"])
                            modes.append(samples[-1]["mode"] or "")
                        else:
                            arms[arm].append(run(prompt, arm, 42, name, rep))
                after = [run(prompt, "baseline", 42, name, -1) for _ in range(2)]
                b0, b1 = float(np.median(before)), float(np.median(after))
                drift = abs(b1 - b0) / b0 if b0 else 0.0
                if drift <= DRIFT_LIMIT or attempt == 2:
                    break
            med = {a: float(np.median(v)) for a, v in arms.items()}
            best = max(statics, key=lambda a: med[a])
            results.append(
                PromptResult(
                    prompt=name,
                    tok_s={a: round(v, 2) for a, v in med.items()},
                    router_classes=classes,
                    router_modes=modes,
                    router_over_baseline=round(med["router"] / med["baseline"], 3),
                    router_over_best_static=round(med["router"] / med[best], 3),
                    best_static=best,
                    drift=round(drift, 4),
                    valid=drift <= DRIFT_LIMIT,
                )
            )
    return RouterReport(
        **info,
        profile=settings.profile,
        max_tokens=max_tokens,
        reps=reps,
        results=results,
        samples=samples,
    )


def format_router_table(report: RouterReport) -> Table:
    """Render the per-prompt medians as a rich table."""
    arms = list(report.results[0].tok_s) if report.results else []
    table = Table(
        title=f"decode tok/s seen by the client, {report.profile}, {report.max_tokens} tokens, "
        f"median of {report.reps}"
    )
    for col in ("prompt", *arms, "router chose", "÷ base", "÷ best", "drift"):
        table.add_column(col, justify="right")
    for r in report.results:
        chose = ", ".join(
            sorted({f"{c}→{m}" for c, m in zip(r.router_classes, r.router_modes, strict=True)})
        )
        table.add_row(
            r.prompt,
            *(f"{r.tok_s[a]:.1f}" for a in arms),
            chose,
            f"{r.router_over_baseline:.2f}",
            f"{r.router_over_best_static:.2f} ({r.best_static})",
            f"{r.drift * 100:.1f} %" + ("" if r.valid else " INVALID"),
        )
    table.caption = "router: first encounter of each prompt, probe and hand-over included"
    return table
