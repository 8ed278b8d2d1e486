"""Experiments declared on the harness, overhead and swap, and their latency table.

- **overhead**: the same short requests straight to a llama-server (``direct``),
  through Fronde with one mode and the decode gate open, and through LiteLLM, at
  c = 1 (with a fake llama-server c = 1, 8, 32, 128: the proxies' own time), streamed
  and not.
- **swap**: one llama-server resident at a time: Fronde's epochs against a swap at
  every mode change (``fifo``), for requests naming mixed modes every ``gap_s``.

Per arm and level: requests, failures, aggregate tok/s (Σ tokens ÷ first sent → last
answer, median over repetitions), p50/p99 latency, p50 TTFT, and p50/p99 added to the
first arm's at the same level and repetition.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from statistics import median
from typing import Any, cast

import numpy as np
from rich.table import Table as RichTable

from fronde.bench.arms import Arm
from fronde.bench.protocol import Level, Plan
from fronde.bench.tables import fitted_table
from fronde.bench.workloads import Item, Workload
from fronde.modes import Mode

__all__ = ["latency_table", "overhead_plan", "swap_plan", "swap_table"]


def overhead_plan(
    fake: str | None, requests: int, max_tokens: int, reps: int, litellm: bool
) -> Plan:
    """Direct, Fronde and LiteLLM (if ``litellm``) on the same short requests.

    ``fake``: a fake llama-server's path (Fronde's child is told to use it), or None.
    """
    env = [("FRONDE_ROUTER__MAX_PARALLEL_DECODES", "1024"), ("FRONDE_ROUTER__LOAD_RULE", "off")]
    if fake is not None:
        env += [("FRONDE_LLAMA_SERVER", fake)]
        env += [("FRONDE_BACKEND__EXTRA_ARGS", '["--fake-tps", "100000"]')]
    arms = [
        Arm("direct", "static", about="llama-server, no proxy"),
        Arm("fronde", "fronde", Mode.BASELINE, env=tuple(env), about="Fronde, gate open"),
    ]
    arms += [Arm("litellm", "litellm", about="LiteLLM's proxy")] if litellm else []
    items = tuple(
        Item(
            f"hello-{i}", "hello", f"Request {i}: say hello.", ({"role": "user", "content": "Hi."},)
        )
        for i in range(requests)
    )
    clients = (1, 8, 32, 128) if fake is not None else (1,)
    levels = tuple(Level(c, 0.0, s) for s in (False, True) for c in clients)
    return Plan.single(Workload("overhead", items), arms, reps, "completion", max_tokens, levels)


def swap_plan(requests: int, max_tokens: int, gap_s: float, reps: int, max_epoch_s: float) -> Plan:
    """``requests`` requests naming baseline, ngram-simple and ngram-mod in a seeded order."""
    modes = [("baseline", "ngram-simple", "ngram-mod")[i % 3] for i in range(requests)]
    random.Random(11).shuffle(modes)  # noqa: S311 - a reproducible order, not a secret
    items = tuple(
        Item(
            f"swap-{i}", m, f"Item {i}: a short note about the {m} mode.\n", (), model=f"fronde:{m}"
        )
        for i, m in enumerate(modes)
    )
    common = [
        ("FRONDE_RESIDENCY", "swap"),
        ("FRONDE_MODES", '["baseline", "ngram-simple", "ngram-mod"]'),
        ("FRONDE_SWAP__MAX_RESIDENT", "1"),
        ("FRONDE_SWAP__MAX_EPOCH_S", str(max_epoch_s)),
        ("FRONDE_SWAP__MAX_WAIT_S", "900"),  # high: no fallback hides a swap
    ]
    arms = tuple(
        Arm(p, "fronde", env=(*common, ("FRONDE_SWAP__POLICY", p)), about=f"swap policy {p}")
        for p in ("fifo", "epoch")
    )
    level = Level(concurrency=requests, gap_s=gap_s, stream=False)
    return Plan.single(Workload("swap", items), arms, reps, "completion", max_tokens, (level,))


def _ms(values: Sequence[float], q: float) -> str:
    return f"{1000 * float(np.percentile(values, q)):.0f}" if values else "-"


def latency_table(samples: Sequence[dict[str, Any]], title: str) -> RichTable:
    """Per arm and level: requests, failures, tok/s, p50/p99 latency, TTFT, added p50/p99 ms."""
    cells: dict[tuple[str, str], dict[int, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for s in samples:
        cells[(s["arm"], s["level"])][s["rep"]].append(s)
    tab = fitted_table(
        title,
        ("arm", "level", "n", "err", "tok/s", "p50", "p99", "ttft", "+p50", "+p99"),
        left={"arm", "level"},
        caption="level: c = requests in flight, gap = s between launches, stream or plain (one"
        " answer); tok/s: aggregate, Σ tokens ÷ span; p50, p99, ttft (first text), +p50,"
        " +p99 (added to the first arm's): ms",
    )
    ref = next(iter(cells), ("", ""))[0]
    for (arm, level), reps in cells.items():
        ok = [s for r in reps.values() for s in r if s["ok"]]
        walls = [s["wall_s"] for s in ok]
        rates = [_rate([s for s in r if s["ok"]]) for r in reps.values()]
        added = [_added(reps[r], cells[(ref, level)].get(r, [])) for r in reps]
        plain = level.endswith("plain")
        tab.add_row(
            arm,
            level if plain else f"{level or 'c1'}-stream",
            str(sum(len(r) for r in reps.values())),
            str(sum(not s["ok"] for r in reps.values() for s in r)),
            f"{median(rates):.1f}",
            _ms(walls, 50),
            _ms(walls, 99),
            "-" if plain else _ms([s["ttft_s"] for s in ok if s.get("ttft_s") is not None], 50),
            f"{median(a[0] for a in added):+.1f}" if arm != ref else "",
            f"{median(a[1] for a in added):+.1f}" if arm != ref else "",
        )
    return tab


def _rate(samples: Sequence[dict[str, Any]]) -> float:
    if not samples:
        return 0.0
    span = max(s["t0"] + s["wall_s"] for s in samples) - min(s["t0"] for s in samples)
    return sum(s["tokens"] for s in samples) / span if span > 0 else 0.0


def _added(arm: Sequence[dict[str, Any]], ref: Sequence[dict[str, Any]]) -> tuple[float, float]:
    a = [s["wall_s"] for s in arm if s["ok"]]
    b = [s["wall_s"] for s in ref if s["ok"]]
    if not a or not b:
        return float("nan"), float("nan")
    p50, p99 = (1000 * (float(np.percentile(a, q)) - float(np.percentile(b, q))) for q in (50, 99))
    return p50, p99


def swap_table(blocks: Sequence[dict[str, Any]]) -> RichTable:
    """Per swap arm: swaps, failed swaps and fallbacks per block (the router's own count)."""
    cols = ("arm", "rep", "swaps", "failed", "fallbacks")
    tab = fitted_table("swaps (per block, from /fronde/v1/router)", cols, left={"arm"})
    for b in blocks:
        router = cast("dict[str, Any]", b.get("router") or {})
        swap = cast("dict[str, Any]", router.get("swap") or {})
        tab.add_row(
            b["arm"],
            str(b["rep"]),
            *(str(swap.get(k, "-")) for k in ("swaps", "swap_failures", "fallbacks")),
        )
    return tab
