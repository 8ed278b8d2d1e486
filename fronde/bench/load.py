"""The load rule measured: aggregate decode throughput with 1, 2 and 4 concurrent clients.

Arms, each at each concurrency, every client sending distinct prompts (so the
router meets each one for the first time):

- ``router``: routed with the configured load rule (default ``serialize``);
- ``router-spread`` and ``router-off``: routed with the other two load rules, each
  on its own `fronde serve` (``FRONDE_ROUTER__LOAD_RULE``);
- ``baseline`` and ``ngram-mod``: forced static modes.

Aggregate throughput = all generated tokens ÷ wall time of the batch (tok/s).
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from pydantic import BaseModel
from rich.table import Table

from fronde.bench.client import stream
from fronde.bench.serve import RunInfo, run_info, running_serve
from fronde.config import Settings

__all__ = ["LoadReport", "format_load_table", "run_load_bench"]

_TOPICS = [
    "rivers", "bridges", "clocks", "maps", "bees", "glass", "salt", "kites",
    "trains", "paper", "tides", "bells", "ropes", "lamps", "mills", "roads",
]  # fmt: skip


def _prompt(topic: str, k: int) -> str:
    return (
        f"# notes_{topic}_{k}.py\n# A small module about {topic}.\n\nclass {topic.title()}Record:\n"
    )


class LoadRow(BaseModel):
    """One arm at one concurrency."""

    arm: str
    clients: int
    requests: int
    tokens: int
    wall_s: float
    aggregate_tok_s: float
    classes: dict[str, int]


class LoadReport(RunInfo):
    """A versioned record of one run of :func:`run_load_bench`."""

    max_tokens: int
    per_client: int
    rows: list[LoadRow]


def _batch(
    base: str, arm: str, clients: int, per_client: int, max_tokens: int, tag: str
) -> LoadRow:
    forced = arm if arm in ("baseline", "ngram-mod") else None

    def client(i: int) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        with httpx.Client(timeout=httpx.Timeout(900.0, connect=5.0)) as http:
            for k in range(per_client):
                topic = _TOPICS[(i * per_client + k) % len(_TOPICS)]
                body = {
                    "prompt": _prompt(f"{topic}_{tag}", k),
                    "max_tokens": max_tokens,
                    "temperature": 0.0,
                    "stream": True,
                }
                headers = {"x-fronde-mode": forced} if forced else {}
                r = deque(stream(http, base, "completion", body, headers), maxlen=1)[0]
                out.append((r.tokens, r.route or ""))
        return out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = [x for xs in pool.map(client, range(clients)) for x in xs]
    wall = time.perf_counter() - t0
    tokens = sum(n for n, _ in results)
    classes: dict[str, int] = {}
    for _, c in results:
        classes[c] = classes.get(c, 0) + 1
    return LoadRow(
        arm=arm,
        clients=clients,
        requests=len(results),
        tokens=tokens,
        wall_s=round(wall, 2),
        aggregate_tok_s=round(tokens / wall, 2),
        classes=classes,
    )


def run_load_bench(
    settings: Settings,
    config_file: Path | None,
    *,
    max_tokens: int = 96,
    per_client: int = 2,
    concurrency: tuple[int, ...] = (1, 2, 4),
) -> LoadReport:
    """Measure aggregate decode throughput per arm and concurrency (see the module docstring).

    Raises:
        FrondeError: a `fronde serve` did not come up, or a request failed.
    """
    info = run_info()
    rows: list[LoadRow] = []
    timeout = settings.backend.start_timeout_s + 30
    with running_serve(config_file, timeout) as serve:
        for c in concurrency:
            for arm in ("router", "baseline", "ngram-mod"):
                rows.append(_batch(serve.base_url, arm, c, per_client, max_tokens, f"a{c}"))
    for rule in ("spread", "off"):
        # The child's own environment: this process's settings stay as they were.
        env = {"FRONDE_ROUTER__LOAD_RULE": rule}
        with running_serve(config_file, timeout, env=env) as serve:
            for c in concurrency:
                rows.append(
                    _batch(
                        serve.base_url, f"router-{rule}", c, per_client, max_tokens, f"{rule}{c}"
                    )
                )
    return LoadReport(
        **info,
        max_tokens=max_tokens,
        per_client=per_client,
        rows=rows,
    )


def format_load_table(report: LoadReport) -> Table:
    """Aggregate tok/s per arm (rows) and concurrency (columns)."""
    conc = sorted({r.clients for r in report.rows})
    arms = list(dict.fromkeys(r.arm for r in report.rows))
    table = Table(
        title=f"aggregate decode tok/s (all tokens ÷ wall), {report.per_client} requests per "
        f"client, {report.max_tokens} tokens each"
    )
    table.add_column("arm")
    for c in conc:
        table.add_column(f"{c} client{'s' if c > 1 else ''}", justify="right")
    for arm in arms:
        cells: list[str] = []
        for c in conc:
            row = next((r for r in report.rows if r.arm == arm and r.clients == c), None)
            cells.append(
                "-"
                if row is None
                else f"{row.aggregate_tok_s:.1f} "
                + "/".join(f"{k}:{v}" for k, v in sorted(row.classes.items()) if k)
            )
        table.add_row(arm, *cells)
    return table
