"""How well shadow acceptance tracks the real α, on the harness.

The priming workload goes to one static llama-server per model-free mode through its
own ``/completion`` with ``return_tokens``: each sample holds its token ids and real α.
Three estimates are replayed (:mod:`fronde.evidence.ngram_replay`): ``own`` (over the
mode's own output, ngram-mod's table mirrored across its server's requests: checks the
replay), ``from_base`` (over plain decoding's output, a fresh table: what Fronde could
estimate while another mode runs) and ``window`` (its first ``probe_tokens`` only).
Pearson r of each against the real α decides whether an estimate may replace a probe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import numpy as np
from rich.table import Table

from fronde.bench.atlas import atlas_arms
from fronde.bench.protocol import Plan
from fronde.bench.tables import figure, fitted_table
from fronde.bench.workloads import Workload, load_workload
from fronde.config import Settings
from fronde.serving import NgramModTable, ShadowStats, shadow_ngram_mod, shadow_ngram_simple

__all__ = ["ShadowRow", "pearson", "shadow_plan", "shadow_rows", "shadow_table"]


class ShadowRow(TypedDict):
    """One prompt × arm (``simple`` or ``mod``): the real α, the three estimates, τ, speed.

    ``real`` is None when nothing was drafted; ``tau`` is the ``from_base`` replay's;
    ``speed`` the decode tok/s ÷ base's on the same prompt.
    """

    prompt: str
    mode: str
    real: float | None
    own: float | None
    from_base: float | None
    window: float | None
    tau: float
    speed: float


def shadow_plan(settings: Settings, max_tokens: int) -> Plan:
    """Every model-free mode on the priming workload, natively, once."""
    return Plan.single(load_workload("priming"), atlas_arms(settings), 1, "native", max_tokens)


def pearson(xs: Sequence[float | None], ys: Sequence[float | None]) -> float | None:
    """Pearson r over the pairs with a ``ys`` value (None: fewer than 3, or flat).

    An ``xs`` of None (nothing drafted) counts as α = 0: a mode that drafts nothing gains nothing.
    """
    pairs = [(x or 0.0, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if len(pairs) < 3:
        return None
    a = np.array(pairs, dtype=float)
    if float(np.ptp(a[:, 0])) == 0.0 or float(np.ptp(a[:, 1])) == 0.0:
        return None
    return float(np.corrcoef(a[:, 0], a[:, 1])[0, 1])


def shadow_rows(
    samples: Sequence[dict[str, Any]],
    workload: Workload,
    tokenize: Callable[[str], list[int]],
    *,
    n_match: int,
    probe_tokens: int,
) -> list[ShadowRow]:
    """One row per prompt × speculative arm: real α, the three estimates, speed ÷ base.

    ``samples`` carry ``ids`` and ``timings``; ``tokenize`` gives a prompt's ids as the
    server does; ``n_match`` is ngram-mod's in Fronde's argv.
    """
    runs = {(s["arm"], s["item"]): s for s in samples if s["ok"] and s.get("ids")}
    mirror = NgramModTable(n_match)
    rows: list[ShadowRow] = []
    for item in workload.items:
        base = runs.get(("base", item.id))
        if base is None:
            continue
        prompt, base_ids = tokenize(item.prompt), base["ids"]
        for arm in ("simple", "mod"):
            run = runs.get((arm, item.id))
            if run is None:
                continue
            n = len(run["ids"])
            own: ShadowStats
            if arm == "simple":
                own = shadow_ngram_simple(prompt, run["ids"], n_predict=n)
                est = shadow_ngram_simple(prompt, base_ids, n_predict=n)
                win = shadow_ngram_simple(prompt, base_ids[:probe_tokens], n_predict=probe_tokens)
            else:
                own = shadow_ngram_mod(prompt, run["ids"], table=mirror, n_predict=n)
                est = shadow_ngram_mod(prompt, base_ids, n_match=n_match, n_predict=n)
                win = shadow_ngram_mod(
                    prompt, base_ids[:probe_tokens], n_match=n_match, n_predict=probe_tokens
                )
            speed = run["timings"]["predicted_per_second"] / base["timings"]["predicted_per_second"]
            rows.append(
                ShadowRow(
                    prompt=item.id,
                    mode=arm,
                    real=run["alpha"],
                    own=own.alpha,
                    from_base=est.alpha,
                    window=win.alpha,
                    tau=round(est.tau, 3),
                    speed=round(speed, 3),
                )
            )
    return rows


def _figures(r: ShadowRow) -> tuple[float | None, ...]:
    """A row's figures in the table's order: real, own, from_base, window, tau, speed."""
    return r["real"], r["own"], r["from_base"], r["window"], r["tau"], r["speed"]


def shadow_table(rows: Sequence[ShadowRow]) -> Table:
    """Real against shadow α per prompt and arm, with Pearson r of each estimate."""
    cols = ("prompt", "mode", "real", "own", "from_base", "window", "tau", "speed")
    table = fitted_table("real vs shadow α", cols, left={"prompt", "mode"})
    for r in rows:
        table.add_row(r["prompt"], r["mode"], *map(figure, _figures(r)))
    notes: list[str] = []
    for arm in ("simple", "mod"):
        mine = [_figures(r) for r in rows if r["mode"] == arm]
        real = [f[0] for f in mine]
        rs = {k: pearson([f[i] for f in mine], real) for i, k in enumerate(cols[3:6], 1)}
        rs["tau~speed"] = pearson([f[4] for f in mine], [f[5] for f in mine])
        notes.append(f"{arm}: " + ", ".join(f"{k} {figure(v)}" for k, v in rs.items()))
    table.caption = (
        "real: α measured; own: α replayed on the mode's own output; from_base: replayed"
        " on plain decoding's output; window: on its first probe_tokens only; tau: τ of"
        " that replay; speed: decode tok/s ÷ base's. Pearson r against the real α — "
        + "; ".join(notes)
    )
    table.caption_justify = "left"
    return table
