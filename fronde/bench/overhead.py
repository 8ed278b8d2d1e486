"""``fronde bench overhead``: what a proxy adds, measured side by side.

The same load goes three ways to one backend:

- ``direct``: straight to the llama-server (or the fake);
- ``fronde``: through `fronde serve`, pass-through (one mode, no probe), with the
  decode gate opened (``max_parallel_decodes`` 1024, ``load_rule = "off"``) so that
  only the proxy's own cost is measured;
- ``litellm``: through LiteLLM's proxy (``litellm[proxy]`` from PyPI, in its own
  virtual environment under the cache folder, made on first use), configured for
  the same backend as an OpenAI-compatible model.

Load: concurrency 1, 8, 32 and 128, streamed and not, ``requests`` requests per
cell, the arms interleaved and the whole grid repeated ``reps`` times. Per cell:

- latency p50 and p99 (non-streamed: the whole answer; streamed: the last byte);
- the **added** latency: the arm's percentile minus direct's in the same repetition;
- requests per second (requests ÷ wall time of the cell);
- streamed: time to first token (first chunk with text) and the mean gap between
  chunks.

Reported numbers are medians over the repetitions. The backend is the fake
llama-server (``tests/fakes/fake_llama_server.py``, ``--fake-tps`` high) for the
proxy's cost; the real gemma llama-server, at concurrency 1, for decode tok/s
through Fronde against direct.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from pydantic import BaseModel

from fronde.backends.process import die_with_parent, free_port, log_tail
from fronde.bench.serve import RunInfo, run_info, running_serve
from fronde.errors import FrondeError

__all__ = [
    "CONCURRENCY",
    "OverheadCell",
    "OverheadReport",
    "litellm_proxy",
    "run_overhead_bench",
]

CONCURRENCY = (1, 8, 32, 128)
LITELLM_SPEC = "litellm[proxy]"
"""What the LiteLLM venv installs (the version it got is recorded in the report)."""


class OverheadCell(BaseModel):
    """One arm at one concurrency, streamed or not, in one repetition (times in ms)."""

    arm: str
    concurrency: int
    stream: bool
    rep: int
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    rps: float
    ttft_p50_ms: float | None = None
    gap_mean_ms: float | None = None
    decode_tok_s: float | None = None


class OverheadReport(RunInfo):
    """The whole run: settings, the LiteLLM version, and every cell."""

    backend: str
    max_tokens: int
    litellm_version: str | None
    cells: list[OverheadCell]


@dataclass
class _One:
    latency_s: float
    ttft_s: float | None
    gaps_s: list[float]
    tokens: int
    ok: bool


async def _request(http: httpx.AsyncClient, url: str, body: dict[str, Any], stream: bool) -> _One:
    """One timed request; a stale pooled connection is retried once, as Fronde does.

    llama-server b11434 sometimes closes a keep-alive connection after a streamed
    answer; without the retry the direct arm counted those as errors (14 of 50 in
    one run) while Fronde, which retries, did not.
    """
    one = await _request_once(http, url, body, stream)
    return one if one is not None else (await _request_once(http, url, body, stream) or _FAILED)


_FAILED = _One(0.0, None, [], 0, False)


async def _request_once(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], stream: bool
) -> _One | None:
    """One timed request; None when a pooled connection was stale (nothing was sent back)."""
    t0 = time.perf_counter()
    if not stream:
        try:
            r = await http.post(url, json=body)
        except httpx.RemoteProtocolError:
            return None
        except httpx.HTTPError:
            return _One(time.perf_counter() - t0, None, [], 0, False)
        return _One(time.perf_counter() - t0, None, [], 0, r.status_code == 200)
    first: float | None = None
    last: float | None = None
    gaps: list[float] = []
    chunks = 0
    try:
        async with http.stream("POST", url, json={**body, "stream": True}) as r:
            if r.status_code != 200:
                await r.aread()
                return _One(time.perf_counter() - t0, None, [], 0, False)
            async for line in r.aiter_lines():
                if not line.startswith("data: {") or '"text":""' in line:
                    continue
                now = time.perf_counter()
                if first is None:
                    first = now
                elif last is not None:
                    gaps.append(now - last)
                last = now
                chunks += 1
    except httpx.RemoteProtocolError:
        if first is None:
            return None
        return _One(time.perf_counter() - t0, None, [], 0, False)
    except httpx.HTTPError:
        return _One(time.perf_counter() - t0, None, [], 0, False)
    end = time.perf_counter()
    ttft = None if first is None else first - t0
    return _One(end - t0, ttft, gaps, chunks, chunks > 0)


async def _cell(
    base: str,
    arm: str,
    model: str,
    concurrency: int,
    stream: bool,
    requests: int,
    max_tokens: int,
    rep: int,
) -> OverheadCell:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    timeout = httpx.Timeout(300.0, connect=10.0)
    body = {"model": model, "prompt": "a b c d", "max_tokens": max_tokens, "temperature": 0}
    url = f"{base}/v1/completions"
    results: list[_One] = []
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as http:
        await _request(http, url, body, stream)  # warm the connection and the route
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(requests):
            queue.put_nowait(i)

        async def worker() -> None:
            while True:
                try:
                    queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                results.append(await _request(http, url, body, stream))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    good = [r for r in results if r.ok]
    lat = np.array([r.latency_s for r in good]) * 1000 if good else np.array([0.0])
    ttfts = [r.ttft_s * 1000 for r in good if r.ttft_s is not None]
    gaps = [g * 1000 for r in good for g in r.gaps_s]
    decode = [
        (r.tokens - 1) / (r.latency_s - r.ttft_s)
        for r in good
        if r.ttft_s is not None and r.tokens > 1 and r.latency_s > r.ttft_s
    ]
    return OverheadCell(
        arm=arm,
        concurrency=concurrency,
        stream=stream,
        rep=rep,
        requests=len(results),
        errors=len(results) - len(good),
        p50_ms=round(float(np.percentile(lat, 50)), 3),
        p99_ms=round(float(np.percentile(lat, 99)), 3),
        rps=round(len(good) / wall, 1),
        ttft_p50_ms=round(statistics.median(ttfts), 3) if ttfts else None,
        gap_mean_ms=round(statistics.fmean(gaps), 3) if gaps else None,
        decode_tok_s=round(statistics.median(decode), 2) if decode else None,
    )


# --- LiteLLM ---------------------------------------------------------------------------


def litellm_python(cache_dir: Path) -> Path:
    """The LiteLLM venv's Python, created and filled on first use (``pip install``).

    Raises:
        FrondeError: the install failed (no network, or PyPI refused).
    """
    venv = cache_dir / "litellm-venv"
    python = venv / "bin" / "python"
    if not (venv / "bin" / "litellm").is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        out = subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", LITELLM_SPEC],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise FrondeError(f"cannot install {LITELLM_SPEC}: {out.stderr.strip()[-300:]}")
    return python


def litellm_version(python: Path) -> str | None:
    """The installed LiteLLM version, or None."""
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or None


@contextlib.contextmanager
def litellm_proxy(python: Path, backend_url: str, timeout_s: float = 120.0) -> Generator[str]:
    """Run LiteLLM's proxy for ``backend_url`` (OpenAI-compatible); yield its base URL.

    The model ``fronde-bench`` maps to ``openai/bench`` at ``backend_url/v1``. One
    worker, no database, logging at its default level.

    Raises:
        FrondeError: it exited, or did not answer within ``timeout_s``.
    """
    port = free_port()
    folder = Path(tempfile.mkdtemp(prefix="fronde-litellm-"))
    config = folder / "config.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: fronde-bench\n"
        "    litellm_params:\n"
        "      model: openai/bench\n"
        f"      api_base: {backend_url}/v1\n"
        "      api_key: none\n"
    )
    log = folder / "litellm.log"
    exe = python.parent / "litellm"
    env = {
        **os.environ,
        "LITELLM_LOG": "ERROR",
        "DISABLE_SCHEMA_UPDATE": "true",
        # No key on either proxy (Fronde runs without api_keys here): loopback only.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [str(exe), "--config", str(config), "--port", str(port), "--host", "127.0.0.1"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=die_with_parent if sys.platform == "linux" else None,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise FrondeError(f"litellm exited with {proc.returncode}: {log_tail(log, 6)}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/health/liveliness", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise FrondeError(f"litellm not ready after {timeout_s:.0f} s: {log_tail(log, 6)}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


# --- the run -----------------------------------------------------------------------------


def run_overhead_bench(
    *,
    cache_dir: Path,
    fake_binary: Path | None,
    requests: int = 200,
    max_tokens: int = 16,
    reps: int = 3,
    concurrency: tuple[int, ...] = CONCURRENCY,
    with_litellm: bool = True,
    progress: Callable[[str], None] | None = None,
) -> OverheadReport:
    """Run the grid (see the module docstring) against one backend.

    Args:
        cache_dir: Fronde's cache folder (the LiteLLM venv lives there).
        fake_binary: the fake llama-server executable for the proxy-cost grid, or
            None for the real llama-server of the default profile (concurrency 1,
            streamed only: decode tok/s through Fronde against direct).
        requests: requests per cell.
        max_tokens: tokens per answer.
        reps: repetitions of the grid.
        concurrency: the concurrency levels.
        with_litellm: include the LiteLLM arm.
        progress: called with one line per finished cell, or None.

    Raises:
        FrondeError: a server did not come up.
    """
    info = run_info()
    env = {
        "FRONDE_MODES": '["baseline"]',
        "FRONDE_ROUTER__MAX_PARALLEL_DECODES": "1024",
        "FRONDE_ROUTER__LOAD_RULE": "off",
        "FRONDE_LOG_LEVEL": "warning",
    }
    if fake_binary is not None:
        env |= {
            "FRONDE_LLAMA_SERVER": str(fake_binary),
            "FRONDE_BACKEND__EXTRA_ARGS": '["--fake-tps", "100000"]',
        }
    else:
        concurrency = (1,)
    python = litellm_python(cache_dir) if with_litellm else None
    cells: list[OverheadCell] = []
    streams = (False, True) if fake_binary is not None else (True,)
    with running_serve(None, 240.0, env=env) as serve:
        direct = serve.backend_urls["baseline"]
        arms: dict[str, tuple[str, str]] = {"direct": (direct, "fronde")}
        arms["fronde"] = (serve.base_url, "fronde")
        with contextlib.ExitStack() as stack:
            if python is not None:
                arms["litellm"] = (
                    stack.enter_context(litellm_proxy(python, direct)),
                    "fronde-bench",
                )
            for rep in range(reps):
                order = list(arms)
                order = order[rep % len(order) :] + order[: rep % len(order)]  # rotate
                for stream in streams:
                    for c in concurrency:
                        for arm in order:
                            base, model = arms[arm]
                            cell = asyncio.run(
                                _cell(base, arm, model, c, stream, requests, max_tokens, rep)
                            )
                            cells.append(cell)
                            if progress is not None:
                                progress(
                                    f"rep {rep} {'stream' if stream else 'plain'} c={c} {arm}: "
                                    f"p50 {cell.p50_ms} ms p99 {cell.p99_ms} ms {cell.rps} req/s"
                                    + (f" errors {cell.errors}" if cell.errors else "")
                                )
    return OverheadReport(
        **info,
        backend="fake llama-server" if fake_binary is not None else "llama-server (gemma)",
        max_tokens=max_tokens,
        litellm_version=litellm_version(python) if python is not None else None,
        cells=cells,
    )


# --- the report ---------------------------------------------------------------------------


class OverheadRow(BaseModel):
    """Medians over repetitions for one arm, concurrency and stream setting (ms, req/s)."""

    arm: str
    concurrency: int
    stream: bool
    p50_ms: float
    p99_ms: float
    added_p50_ms: float | None
    added_p99_ms: float | None
    rps: float
    ttft_p50_ms: float | None
    gap_mean_ms: float | None
    decode_tok_s: float | None
    decode_vs_direct: float | None = None
    """Median over repetitions of this arm's decode tok/s ÷ direct's in the same one."""
    errors: int


def summarize(report: OverheadReport) -> list[OverheadRow]:
    """Medians per (arm, concurrency, stream); added latency against direct per repetition."""
    rows: list[OverheadRow] = []
    keys = sorted(
        {(c.stream, c.concurrency, c.arm) for c in report.cells},
        key=lambda k: (k[0], k[1], k[2] != "direct", k[2] == "litellm", k[2]),
    )
    for stream, conc, arm in keys:
        mine = {
            c.rep: c
            for c in report.cells
            if (c.stream, c.concurrency, c.arm) == (stream, conc, arm)
        }
        base = {
            c.rep: c
            for c in report.cells
            if (c.stream, c.concurrency, c.arm) == (stream, conc, "direct")
        }
        added50 = [mine[r].p50_ms - base[r].p50_ms for r in mine if r in base]
        added99 = [mine[r].p99_ms - base[r].p99_ms for r in mine if r in base]
        decode_ratio: list[float | None] = []
        for r in mine:
            arm_tps, direct_tps = mine[r].decode_tok_s, base[r].decode_tok_s if r in base else None
            if arm_tps and direct_tps:
                decode_ratio.append(arm_tps / direct_tps)

        def med(values: list[float | None]) -> float | None:
            got = [v for v in values if v is not None]
            return round(statistics.median(got), 3) if got else None

        cells = list(mine.values())
        rows.append(
            OverheadRow(
                arm=arm,
                concurrency=conc,
                stream=stream,
                p50_ms=med([c.p50_ms for c in cells]) or 0.0,
                p99_ms=med([c.p99_ms for c in cells]) or 0.0,
                added_p50_ms=None if arm == "direct" else med(list(added50)),
                added_p99_ms=None if arm == "direct" else med(list(added99)),
                rps=med([c.rps for c in cells]) or 0.0,
                ttft_p50_ms=med([c.ttft_p50_ms for c in cells]),
                gap_mean_ms=med([c.gap_mean_ms for c in cells]),
                decode_tok_s=med([c.decode_tok_s for c in cells]),
                decode_vs_direct=None if arm == "direct" else med(decode_ratio),
                errors=sum(c.errors for c in cells),
            )
        )
    return rows


def markdown(report: OverheadReport) -> str:
    """The result table as markdown, with the goals checked where they apply."""
    rows = summarize(report)
    reps = len({c.rep for c in report.cells})
    lines = [
        f"# Proxy overhead: {report.backend}, {report.max_tokens} tokens per answer",
        "",
        f"Run {report.started_at} on {report.machine.get('cpu')} ({report.machine.get('cpus')} "
        f"CPUs), commit {str(report.commit)[:10]}{' (dirty)' if report.dirty else ''}; "
        f"LiteLLM {report.litellm_version or 'not run'}. Medians of {reps} repetitions; "
        "added = arm − direct, and decode ÷ direct, per repetition.",
        "",
        "| stream | conc. | arm | p50 ms | p99 ms | added p50 ms | added p99 ms | req/s "
        "| TTFT p50 ms | chunk gap ms | decode tok/s | decode ÷ direct | errors |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def f(v: float | None, d: int = 2) -> str:
        return "-" if v is None else f"{v:.{d}f}"

    for r in rows:
        lines.append(
            f"| {'yes' if r.stream else 'no'} | {r.concurrency} | {r.arm} | {f(r.p50_ms)} | "
            f"{f(r.p99_ms)} | {f(r.added_p50_ms)} | {f(r.added_p99_ms)} | {f(r.rps, 0)} | "
            f"{f(r.ttft_p50_ms)} | {f(r.gap_mean_ms)} | {f(r.decode_tok_s, 1)} | "
            f"{f(r.decode_vs_direct, 3)} | {r.errors} |"
        )
    return "\n".join(lines) + "\n"
