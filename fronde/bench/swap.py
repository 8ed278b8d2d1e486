"""``fronde bench swap``: a mixed workload under swap residency, epochs against FIFO.

One llama-server is up at a time (``max_resident = 1``), as on the seed's 8 GB GPU.
The same 24 requests (8 per mode, interleaved by a seeded shuffle, one arriving every
``gap_s``, as from several agents) run twice per repetition:

- ``fifo``: strict arrival order, a swap at every mode change;
- ``epoch``: Fronde's scheduler, which batches mode changes into epochs.

Each arm runs in its own `fronde serve`, started fresh; the order alternates between
repetitions (fifo, epoch, then epoch, fifo) so that drift falls on both arms. The
report gives, per arm, the swaps, the wall time from the first request sent to the
last answer, the mean swap time (``fronde_swap_seconds``) and the request latency,
with medians over the repetitions.
"""

from __future__ import annotations

import random
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import BaseModel
from rich.table import Table

from fronde.bench.serve import RunInfo, run_info, running_serve
from fronde.config import Settings
from fronde.errors import FrondeError

__all__ = ["SwapArm", "SwapReport", "format_swap_table", "run_swap_bench", "workload"]

SWAP_MODES = ("baseline", "ngram-simple", "ngram-mod")
MAX_WAIT_S = 900.0
"""The wait bound during the benchmark: high, so that no fallback hides a swap."""


class SwapArm(BaseModel):
    """One arm's run: policy, swaps, times (seconds), and per-request latency."""

    policy: str
    rep: int
    requests: int
    swaps: int
    swap_failures: int
    fallbacks: int
    wall_s: float
    swap_s_mean: float
    swap_s_total: float
    latency_p50_s: float
    latency_max_s: float
    modes_served: list[str]


class SwapReport(RunInfo):
    """The whole benchmark: settings and every arm's run."""

    requests: int
    max_tokens: int
    gap_s: float
    max_epoch_s: float
    arms: list[SwapArm]


def workload(n: int, seed: int = 11) -> list[str]:
    """``n`` modes, equally many of each of :data:`SWAP_MODES`, in a seeded random order."""
    modes = [SWAP_MODES[i % len(SWAP_MODES)] for i in range(n)]
    random.Random(seed).shuffle(modes)  # noqa: S311 - a reproducible order, not a secret
    return modes


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def _run_arm(
    config_file: Path | None,
    settings: Settings,
    policy: str,
    rep: int,
    modes: list[str],
    max_tokens: int,
    gap_s: float,
    max_epoch_s: float,
) -> SwapArm:
    env = {
        "FRONDE_RESIDENCY": "swap",
        "FRONDE_MODES": '["' + '","'.join(SWAP_MODES) + '"]',
        "FRONDE_SWAP__MAX_RESIDENT": "1",
        "FRONDE_SWAP__POLICY": policy,
        "FRONDE_SWAP__MAX_EPOCH_S": str(max_epoch_s),
        "FRONDE_SWAP__MAX_WAIT_S": str(MAX_WAIT_S),
    }
    latencies: list[float] = [0.0] * len(modes)
    served: list[str] = [""] * len(modes)
    errors: list[str] = []
    with running_serve(config_file, settings.backend.start_timeout_s + 30, env=env) as serve:
        base = serve.base_url

        def one(i: int, mode: str) -> None:
            body = {
                "prompt": f"Item {i}: a short note about the {mode} mode.\n",
                "max_tokens": max_tokens,
                "temperature": 0,
                "model": f"fronde:{mode}",
            }
            t = time.monotonic()
            try:
                r = httpx.post(f"{base}/v1/completions", json=body, timeout=MAX_WAIT_S + 300)
            except httpx.HTTPError as exc:
                errors.append(f"request {i}: {exc}")
                return
            latencies[i] = time.monotonic() - t
            if r.status_code != 200:
                errors.append(f"request {i}: {r.status_code} {r.text[:200]}")
                return
            served[i] = r.headers.get("x-fronde-mode", "")

        threads = [threading.Thread(target=one, args=(i, m)) for i, m in enumerate(modes)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
            time.sleep(gap_s)
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        if errors:
            raise FrondeError(f"swap bench ({policy}): {errors[0]}")
        state = httpx.get(f"{base}/fronde/v1/router", timeout=10).json()["swap"]
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
    count = _metric(metrics, "fronde_swap_seconds_count")
    total = _metric(metrics, "fronde_swap_seconds_sum")
    return SwapArm(
        policy=policy,
        rep=rep,
        requests=len(modes),
        swaps=state["swaps"],
        swap_failures=state["swap_failures"],
        fallbacks=state["fallbacks"],
        wall_s=round(wall, 2),
        swap_s_mean=round(total / count, 3) if count else 0.0,
        swap_s_total=round(total, 2),
        latency_p50_s=round(statistics.median(latencies), 2),
        latency_max_s=round(max(latencies), 2),
        modes_served=served,
    )


def run_swap_bench(
    settings: Settings,
    config_file: Path | None,
    *,
    requests: int = 24,
    max_tokens: int = 32,
    gap_s: float = 0.25,
    reps: int = 2,
    max_epoch_s: float = 30.0,
    progress: Callable[[str], None] | None = None,
) -> SwapReport:
    """Run the fifo and epoch arms ``reps`` times each, alternating their order.

    Args:
        settings: settings (backend start timeout).
        config_file: the user's TOML file, or None.
        requests: requests in the workload (a multiple of 3 keeps the modes equal).
        max_tokens: tokens generated per request.
        gap_s: time between two arrivals, seconds.
        reps: repetitions of each arm.
        max_epoch_s: the epoch arm's ``swap.max_epoch_s``, seconds.
        progress: called with one line per finished arm, or None.

    Raises:
        FrondeError: a `fronde serve` did not come up, or a request failed.
    """
    info = run_info()
    modes = workload(requests)
    arms: list[SwapArm] = []
    for rep in range(reps):
        order = ("fifo", "epoch") if rep % 2 == 0 else ("epoch", "fifo")
        for policy in order:
            arm = _run_arm(
                config_file, settings, policy, rep, modes, max_tokens, gap_s, max_epoch_s
            )
            arms.append(arm)
            if progress is not None:
                progress(
                    f"rep {rep} {policy}: {arm.swaps} swaps, wall {arm.wall_s} s, "
                    f"swap {arm.swap_s_mean} s"
                )
    return SwapReport(
        **info,
        requests=requests,
        max_tokens=max_tokens,
        gap_s=gap_s,
        max_epoch_s=max_epoch_s,
        arms=arms,
    )


def format_swap_table(report: SwapReport) -> Table:
    """Medians per policy, and epoch ÷ fifo wall time."""
    table = Table(
        title=f"swap residency, max_resident 1: {report.requests} mixed requests "
        f"({report.max_tokens} tokens each, one every {report.gap_s} s), medians of "
        f"{len(report.arms) // 2} runs per policy"
    )
    for col in ("policy", "swaps", "wall s", "mean swap s", "swap time s", "p50 latency s"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    walls: dict[str, float] = {}
    for policy in ("fifo", "epoch"):
        rows = [a for a in report.arms if a.policy == policy]
        if not rows:
            continue
        walls[policy] = statistics.median(a.wall_s for a in rows)
        table.add_row(
            policy,
            f"{statistics.median(a.swaps for a in rows):g}",
            f"{walls[policy]:.1f}",
            f"{statistics.median(a.swap_s_mean for a in rows):.2f}",
            f"{statistics.median(a.swap_s_total for a in rows):.1f}",
            f"{statistics.median(a.latency_p50_s for a in rows):.1f}",
        )
    if "fifo" in walls and "epoch" in walls:
        table.caption = f"epoch wall ÷ fifo wall = {walls['epoch'] / walls['fifo']:.2f}"
    return table
