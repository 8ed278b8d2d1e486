"""Each mode's decode speed through Fronde and directly, interleaved in one run.

`fronde serve` is started as its own process (as a user runs it), then the same
streamed completion is sent, for every mode, once through Fronde (mode forced
with ``x-fronde-mode``) and once straight to that mode's llama-server, alternating
which goes first on each repetition so that drift hits both sides alike. Two
decode rates are kept per request:

- ``server_tok_s``: llama-server's own ``timings.predicted_per_second`` (decode only,
  excludes the first token; it cannot see the proxy);
- ``client_tok_s``: (``predicted_n`` − 1) ÷ (time of the last content chunk − time of
  the first), as the client receives it, so it includes the relay's cost.

Medians over ``reps`` are reported; ratios are computed within this one run.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import httpx
import numpy as np
from pydantic import BaseModel
from rich.table import Table

from fronde.bench.serve import RunInfo, run_info, running_serve
from fronde.bench.stream import StreamedCompletion, collect_completion
from fronde.config import Settings

__all__ = [
    "BENCH_PROMPT",
    "ModeSummary",
    "ModesReport",
    "Sample",
    "format_table",
    "run_modes_bench",
]


BENCH_PROMPT = """# file: stats.py (original)
def mean(values):
    total = 0
    for v in values:
        total += v
    return total / len(values)


def variance(values):
    m = mean(values)
    total = 0
    for v in values:
        total += (v - m) ** 2
    return total / len(values)


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x

# file: stats.py (unchanged copy)
def mean(values):
"""
"""A completion-style prompt a base model continues by copying: the case n-gram
speculation is for. The full battery comes with the benchmark harness."""


class Sample(BaseModel):
    """One streamed request's measurements (tok/s are decode rates)."""

    mode: str
    path: Literal["proxy", "direct"]
    rep: int
    predicted_n: int
    server_tok_s: float
    client_tok_s: float
    draft_n: int | None
    draft_n_accepted: int | None
    wall_s: float
    output_sha256: str
    output_head: str


class ModeSummary(BaseModel):
    """Medians per mode over the repetitions.

    Attributes:
        proxy_over_direct: median client tok/s via Fronde ÷ median client tok/s direct.
            It mixes Fronde's cost with the backend's run-to-run variance.
        relay_efficiency: median over requests via Fronde of client ÷ server tok/s,
            divided by the same median for direct requests. The backend's own speed
            cancels out of each request, so this is Fronde's cost alone (1.0 = free).
    """

    mode: str
    proxy_client_tok_s: float
    direct_client_tok_s: float
    proxy_over_direct: float
    relay_efficiency: float
    direct_server_tok_s: float
    speedup_vs_baseline: float | None
    alpha: float | None
    same_output_proxy_direct: bool


class ModesReport(RunInfo):
    """A versioned record of one run of :func:`run_modes_bench`."""

    profile: str
    max_tokens: int
    reps: int
    samples: list[Sample]
    summary: list[ModeSummary]


def _sample(mode: str, path: Literal["proxy", "direct"], rep: int, r: StreamedCompletion) -> Sample:
    t = r.timings
    return Sample(
        mode=mode,
        path=path,
        rep=rep,
        predicted_n=int(t["predicted_n"]),
        server_tok_s=float(t["predicted_per_second"]),
        client_tok_s=r.client_tok_s(),
        draft_n=t.get("draft_n"),
        draft_n_accepted=t.get("draft_n_accepted"),
        wall_s=(r.last or r.t_start) - r.t_start,
        output_sha256=hashlib.sha256(r.text.encode()).hexdigest(),
        output_head=r.text[:120],
    )


def _summarize(samples: list[Sample]) -> list[ModeSummary]:
    modes = list(dict.fromkeys(s.mode for s in samples))

    def med(mode: str, path: str, attr: str) -> float:
        vals = [getattr(s, attr) for s in samples if s.mode == mode and s.path == path]
        return float(np.median(vals))

    base = med("baseline", "direct", "server_tok_s") if "baseline" in modes else None
    out: list[ModeSummary] = []
    for m in modes:
        proxy, direct = med(m, "proxy", "client_tok_s"), med(m, "direct", "client_tok_s")
        drafted = sum(s.draft_n or 0 for s in samples if s.mode == m)
        accepted = sum(s.draft_n_accepted or 0 for s in samples if s.mode == m)
        shas = {(s.path, s.output_sha256) for s in samples if s.mode == m}
        server = med(m, "direct", "server_tok_s")

        def efficiency(path: str, mode: str = m) -> float:
            return float(
                np.median(
                    [
                        s.client_tok_s / s.server_tok_s
                        for s in samples
                        if s.mode == mode and s.path == path and s.server_tok_s > 0
                    ]
                )
            )

        out.append(
            ModeSummary(
                mode=m,
                proxy_client_tok_s=round(proxy, 2),
                direct_client_tok_s=round(direct, 2),
                proxy_over_direct=round(proxy / direct, 4) if direct else 0.0,
                relay_efficiency=round(efficiency("proxy") / efficiency("direct"), 4),
                direct_server_tok_s=round(server, 2),
                speedup_vs_baseline=round(server / base, 3) if base else None,
                alpha=round(accepted / drafted, 3) if drafted else None,
                same_output_proxy_direct=len({sha for _, sha in shas}) == 1,
            )
        )
    return out


def run_modes_bench(
    settings: Settings, config_file: Path | None, *, max_tokens: int = 128, reps: int = 3
) -> ModesReport:
    """Run the interleaved proxy-vs-direct decode benchmark over every ready mode.

    Args:
        settings: settings for the run (profile, cache, binary).
        config_file: passed on to the `fronde serve` child.
        max_tokens: tokens generated per request.
        reps: repetitions; medians are reported.

    Returns:
        The report, samples included.

    Raises:
        FrondeError: `fronde serve` did not come up, or a request failed.
    """
    info = run_info()
    samples: list[Sample] = []
    with (
        running_serve(config_file, settings.backend.start_timeout_s + 30) as serve,
        httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0)) as http,
    ):
        base, urls = serve.base_url, serve.backend_urls
        body = {
            "prompt": BENCH_PROMPT,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": 42,
            "stream": True,
        }
        # Warm-up with the full request: pages loaded, prompt cached, and
        # ngram-mod's pool (which persists across requests) primed, so that
        # proxy and direct meet the same backend state.
        for url in urls.values():
            collect_completion(http, f"{url}/v1/completions", body, {})
        for rep in range(reps):
            for mode, url in urls.items():
                order: list[Literal["proxy", "direct"]] = ["proxy", "direct"]
                if rep % 2:
                    order.reverse()
                for path in order:
                    if path == "proxy":
                        r = collect_completion(
                            http, f"{base}/v1/completions", body, {"x-fronde-mode": mode}
                        )
                    else:
                        r = collect_completion(http, f"{url}/v1/completions", body, {})
                    samples.append(_sample(mode, path, rep, r))
    return ModesReport(
        **info,
        profile=settings.profile,
        max_tokens=max_tokens,
        reps=reps,
        samples=samples,
        summary=_summarize(samples),
    )


def format_table(report: ModesReport) -> Table:
    """Render the summary as a rich table (decode tok/s, medians)."""
    table = Table(
        title=f"decode tok/s, {report.profile}, {report.max_tokens} tokens, median of {report.reps}"
    )
    for col in ("mode", "Fronde", "direct", "ratio", "relay", "server", "× base", "α", "same"):
        table.add_column(col, justify="right")
    table.caption = (
        "Fronde, direct: streamed decode tok/s seen by the client; ratio: Fronde ÷ direct; "
        "relay: Fronde's own cost with backend variance cancelled (client ÷ server tok/s, "
        "via Fronde ÷ direct); server: llama-server's predicted_per_second; × base: server "
        "decode ÷ baseline's; α = accepted ÷ drafted; same: identical text via both paths"
    )
    for s in report.summary:
        table.add_row(
            s.mode,
            f"{s.proxy_client_tok_s:.1f}",
            f"{s.direct_client_tok_s:.1f}",
            f"{s.proxy_over_direct:.3f}",
            f"{s.relay_efficiency:.3f}",
            f"{s.direct_server_tok_s:.1f}",
            f"{s.speedup_vs_baseline:.2f}" if s.speedup_vs_baseline is not None else "-",
            f"{s.alpha:.2f}" if s.alpha is not None else "-",
            "yes" if s.same_output_proxy_direct else "no",
        )
    return table


PROXY_FLOOR = 0.95
"""Fronde must deliver ≥ this fraction of the decode rate it receives, per mode."""


def verdict(report: ModesReport, floor: float = PROXY_FLOOR) -> tuple[bool, list[str]]:
    """Check that Fronde keeps at least ``floor`` of the decode rate in every mode.

    The check is on :attr:`ModeSummary.relay_efficiency`, Fronde's own cost with
    the backend's run-to-run variance cancelled; the raw Fronde ÷ direct ratio of
    medians is printed beside it.

    Returns:
        (all passed, one line per mode).
    """
    lines: list[str] = []
    ok = True
    for s in report.summary:
        passed = s.relay_efficiency >= floor
        ok &= passed
        lines.append(
            f"{'PASS' if passed else 'FAIL'} {s.mode}: relay {s.relay_efficiency:.3f} (floor"
            f" {floor:.2f}); via Fronde {s.proxy_client_tok_s:.1f} tok/s, direct"
            f" {s.direct_client_tok_s:.1f} tok/s, ratio {s.proxy_over_direct:.3f}"
        )
    return ok, lines
