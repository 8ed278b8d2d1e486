"""How well shadow acceptance tracks the real α, over the priming workload.

For each of its prompts (completion form), every model-free mode's llama-server generates the same
greedy completion (native ``/completion`` on token ids, ``return_tokens``), and its
real α comes from ``timings``. Three shadow estimates are made from token ids
(:mod:`fronde.router.shadow`):

- ``own``: the replay over the mode's own output, with the ngram-mod table mirrored
  across every request that server saw. It checks the replay itself.
- ``from_baseline``: the replay over plain decoding's output, with a fresh table:
  the estimate Fronde could make while another mode runs.
- ``probe_window``: the same over only the first ``probe_tokens`` of that output,
  which is what a 48-token probe leaves to work with.

Pearson r of each estimate against the real α, over the prompts, is the figure
that decides whether the estimate may replace a probe.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from pydantic import BaseModel
from rich.table import Table

from fronde.bench.serve import RunInfo, run_info, running_serve
from fronde.bench.workloads import load_workload
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.router.shadow import NgramModTable, ShadowStats, shadow_ngram_mod, shadow_ngram_simple

__all__ = ["ShadowReport", "ShadowRow", "format_shadow_table", "pearson", "run_shadow_bench"]

_MODES = ("ngram-simple", "ngram-mod")


class ShadowRow(BaseModel):
    """One prompt × mode: the real α and speed, and the shadow estimates (α)."""

    prompt: str
    mode: str
    tokens: int
    real_alpha: float | None
    real_tau: float | None
    real_tok_s: float
    baseline_tok_s: float
    speedup: float
    own_alpha: float | None
    from_baseline_alpha: float | None
    from_baseline_tau: float
    probe_window_alpha: float | None
    same_output_as_baseline: bool


class ShadowReport(RunInfo):
    """A versioned record of one run of :func:`run_shadow_bench`."""

    profile: str
    max_tokens: int
    probe_tokens: int
    rows: list[ShadowRow]
    correlation: dict[str, dict[str, float | None]]


def pearson(xs: list[float | None], ys: list[float | None]) -> float | None:
    """Pearson r over the pairs where both values exist (None: fewer than 3, or flat).

    An estimate of None (nothing drafted) counts as α = 0 when the other side is
    known, since a mode that drafts nothing gains nothing.
    """
    pairs = [(x or 0.0, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if len(pairs) < 3:
        return None
    a = np.array(pairs, dtype=float)
    if float(np.ptp(a[:, 0])) == 0.0 or float(np.ptp(a[:, 1])) == 0.0:
        return None
    return float(np.corrcoef(a[:, 0], a[:, 1])[0, 1])


def _complete(
    http: httpx.Client, url: str, ids: list[int], n: int, stop: str | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt": ids,
        "n_predict": n,
        "temperature": 0.0,
        "return_tokens": True,
        "cache_prompt": True,
    }
    if stop:
        body["stop"] = [stop]
    r = http.post(f"{url}/completion", json=body)
    if r.status_code != 200:
        raise FrondeError(f"{url}/completion returned HTTP {r.status_code}: {r.text[:200]}")
    return r.json()


def _alpha(t: dict[str, Any]) -> float | None:
    drafted = t.get("draft_n") or 0
    return (t.get("draft_n_accepted") or 0) / drafted if drafted else None


def run_shadow_bench(
    settings: Settings, config_file: Path | None, *, max_tokens: int = 256, probe_tokens: int = 48
) -> ShadowReport:
    """Measure real and shadow α for ngram-simple and ngram-mod over the priming workload.

    Raises:
        FrondeError: `fronde serve` did not come up, a mode is missing, or a request failed.
    """
    info = run_info()
    rows: list[ShadowRow] = []
    mirror = NgramModTable(settings.speculation.ngram_mod_n_match)
    with (
        running_serve(config_file, settings.backend.start_timeout_s + 30) as serve,
        httpx.Client(timeout=httpx.Timeout(900.0, connect=5.0)) as http,
    ):
        urls = serve.backend_urls
        missing = [m for m in ("baseline", *_MODES) if m not in urls]
        if missing:
            raise FrondeError(f"shadow bench needs modes {', '.join(missing)}; add them to modes")

        def tokenize(text: str) -> list[int]:
            r = http.post(
                f"{urls['baseline']}/tokenize",
                json={"content": text, "add_special": True, "parse_special": True},
            )
            return [int(t) for t in r.json()["tokens"]]

        warm = tokenize("Hello.")
        for m in ("baseline", *_MODES):
            out = _complete(http, urls[m], warm, 8, None)
            if m == "ngram-mod":
                shadow_ngram_mod(warm, out["tokens"], table=mirror, n_predict=8)
        for p in load_workload("priming").items:
            ids = tokenize(p.prompt)
            stop = p.stop[0] if p.stop else None
            base = _complete(http, urls["baseline"], ids, max_tokens, stop)
            base_ids = [int(t) for t in base["tokens"]]
            base_tps = float(base["timings"]["predicted_per_second"])
            window = base_ids[:probe_tokens]
            for m in _MODES:
                out = _complete(http, urls[m], ids, max_tokens, stop)
                got = [int(t) for t in out["tokens"]]
                t = out["timings"]
                own: ShadowStats
                if m == "ngram-simple":
                    own = shadow_ngram_simple(ids, got, n_predict=max_tokens)
                    est = shadow_ngram_simple(ids, base_ids, n_predict=max_tokens)
                    win = shadow_ngram_simple(ids, window, n_predict=probe_tokens)
                else:
                    own = shadow_ngram_mod(ids, got, table=mirror, n_predict=max_tokens)
                    n = settings.speculation.ngram_mod_n_match
                    est = shadow_ngram_mod(ids, base_ids, n_match=n, n_predict=max_tokens)
                    win = shadow_ngram_mod(ids, window, n_match=n, n_predict=probe_tokens)
                real_alpha = _alpha(t)
                n_pred = int(t["predicted_n"])
                acc = int(t.get("draft_n_accepted") or 0)
                tps = float(t["predicted_per_second"])
                rows.append(
                    ShadowRow(
                        prompt=p.id,
                        mode=m,
                        tokens=n_pred,
                        real_alpha=real_alpha,
                        real_tau=n_pred / (n_pred - acc) if real_alpha is not None else None,
                        real_tok_s=round(tps, 2),
                        baseline_tok_s=round(base_tps, 2),
                        speedup=round(tps / base_tps, 3),
                        own_alpha=own.alpha,
                        from_baseline_alpha=est.alpha,
                        from_baseline_tau=round(est.tau, 3),
                        probe_window_alpha=win.alpha,
                        same_output_as_baseline=got == base_ids,
                    )
                )
    correlation: dict[str, dict[str, float | None]] = {}
    for m in _MODES:
        mine = [r for r in rows if r.mode == m]
        real = [r.real_alpha for r in mine]
        correlation[m] = {
            "own": pearson([r.own_alpha for r in mine], real),
            "from_baseline": pearson([r.from_baseline_alpha for r in mine], real),
            "probe_window": pearson([r.probe_window_alpha for r in mine], real),
            "tau_vs_speedup": pearson(
                [r.from_baseline_tau for r in mine], [r.speedup for r in mine]
            ),
        }
    return ShadowReport(
        **info,
        profile=settings.profile,
        max_tokens=max_tokens,
        probe_tokens=probe_tokens,
        rows=rows,
        correlation=correlation,
    )


def _f(x: float | None) -> str:
    return "—" if x is None or math.isnan(x) else f"{x:.2f}"


def format_shadow_table(report: ShadowReport) -> Table:
    """Render real against shadow α per prompt and mode, with the correlations."""
    table = Table(title=f"real vs shadow α, {report.profile}, {report.max_tokens} tokens")
    cols = ("prompt", "mode", "real α", "own α", "from base α", "window α", "τ est", "÷ base")
    for col in cols:
        table.add_column(col, justify="right")
    for r in report.rows:
        table.add_row(
            r.prompt,
            r.mode,
            _f(r.real_alpha),
            _f(r.own_alpha),
            _f(r.from_baseline_alpha),
            _f(r.probe_window_alpha),
            _f(r.from_baseline_tau),
            _f(r.speedup),
        )
    table.caption = "Pearson r vs real α: " + "; ".join(
        f"{m}: " + ", ".join(f"{k} {_f(v)}" for k, v in c.items())
        for m, c in report.correlation.items()
    )
    return table
