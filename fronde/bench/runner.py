"""The battery runner: every config × prompt, bracketed by baseline, into resumable JSONL.

Each static config is its own llama-server (llama.cpp's spec-type names; b11434
fixes the type per process), all started at once and kept warm. The router runs
through `fronde serve`, as a user runs it, with the prompt-hash cache missed on
purpose (a new ``seed`` per request, ignored at temperature 0), so the probe's
cost is always in the figure.

For one prompt the order is ``B C1 B C2 B … Cn B``: each B is baseline measured
``reps`` times, and serves as the "after" reference of one config and the "before"
of the next. A cell whose references drift by more than 5 % is measured again
between two fresh references, then kept as invalid if it drifts again.

Every figure is client-observed decode tok/s: (tokens − 1) ÷ (last token's
arrival − first token's), from a stream, so a probe's hand-over with its prefill
is paid for. llama-server's own ``predicted_per_second`` is kept beside it.

Records are appended to the JSONL one cell at a time; ``resume`` skips cells
already recorded, and a failed cell writes a failure record instead of stopping
the battery.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np

from fronde.backends.pool import plan_pool
from fronde.backends.process import LaunchSpec, LlamaServerProcess
from fronde.bench.battery import BATTERY, BatteryPrompt
from fronde.bench.serve import RunningServe, run_info, running_serve
from fronde.bench.stats import (
    DEGENERATE_SCORE,
    DRIFT_LIMIT,
    bracket,
    first_difference,
    repetition_score,
)
from fronde.config import Settings
from fronde.errors import FrondeError
from fronde.logging import get_logger
from fronde.modes import Mode
from fronde.runtime.install import find_llama_binary, llama_build_info
from fronde.runtime.local import profile_of
from fronde.runtime.models import model_path

__all__ = [
    "SCHEMA_VERSION",
    "BatteryOptions",
    "Config",
    "Run",
    "all_started",
    "backends",
    "battery_configs",
    "bench_client",
    "direct_run",
    "done_keys",
    "routed_run",
    "run_battery",
]

log = get_logger(__name__)

SCHEMA_VERSION = 1
"""Version of the JSONL record layout."""


@dataclass(frozen=True)
class Config:
    """One battery config.

    Attributes:
        name: the config's key in records (``ngram-mod-12``, ``router``).
        args: llama-server argv added to the baseline's (empty for baseline).
        router: measured through `fronde serve` instead of a direct backend.
    """

    name: str
    args: tuple[str, ...] = ()
    router: bool = False


def battery_configs(draft: Path | None) -> list[Config]:
    """The configs of the battery, in run order (the original FRONDE sweep plus ours).

    ngram-mod's n_match sweep (6, 12, 24) is the seed's; llama.cpp's default is 24,
    Fronde runs 12. The draft grid (n_max × p_min) and the hybrid
    ``ngram-mod,draft-simple`` exist only when the profile has a draft model.

    Args:
        draft: the draft model's GGUF, or None.
    """
    configs = [
        Config("baseline"),
        Config("ngram-simple", ("--spec-type", "ngram-simple")),
        *(
            Config(
                f"ngram-mod-{n}", ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", str(n))
            )
            for n in (6, 12, 24)
        ),
        Config("ngram-map-k", ("--spec-type", "ngram-map-k")),
        Config("ngram-map-k4v", ("--spec-type", "ngram-map-k4v")),
        Config("ngram-cache", ("--spec-type", "ngram-cache")),
    ]
    if draft is not None:
        md = ("--spec-draft-model", str(draft))
        for n_max in (4, 8, 16):
            for p_min in (0.3, 0.6):
                grid = ("--spec-draft-n-max", str(n_max), "--spec-draft-p-min", str(p_min))
                configs.append(
                    Config(f"draft-n{n_max}-p{p_min}", (*md, "--spec-type", "draft-simple", *grid))
                )
        configs.append(Config("ngram-mod+draft", (*md, "--spec-type", "ngram-mod,draft-simple")))
    configs.append(Config("router", router=True))
    return configs


@dataclass(frozen=True)
class BatteryOptions:
    """How much to measure.

    Attributes:
        reps: repetitions per measurement (medians are kept).
        gen_tokens: tokens per generation prompt (the seed: 768).
        edit_tokens: tokens per edit prompt (the seed: 1536).
        prompts: prompt names to run (all when empty).
        configs: config names to run (all when empty; baseline is always measured).
    """

    reps: int = 3
    gen_tokens: int = 128
    edit_tokens: int = 256
    prompts: tuple[str, ...] = ()
    configs: tuple[str, ...] = ()


@dataclass
class Run:
    """One streamed generation as the client saw it."""

    text: str = ""
    ids: list[int] = field(default_factory=list[int])
    timings: dict[str, Any] = field(default_factory=dict[str, Any])
    first: float | None = None
    last: float | None = None
    wall_s: float = 0.0
    route: list[str] = field(default_factory=list[str])

    def arrived(self, text: str, ids: list[int] | None = None) -> None:
        """Note a piece of output arriving now (its text and, when known, token ids)."""
        now = time.perf_counter()
        self.first = self.first if self.first is not None else now
        self.last = now
        self.text += text
        self.ids += ids or []

    @property
    def tokens(self) -> int:
        """Generated tokens (llama-server's ``predicted_n``)."""
        return int(self.timings.get("predicted_n") or 0)

    @property
    def client_tok_s(self) -> float:
        """(tokens − 1) ÷ (last − first arrival), decode tok/s as received."""
        if self.first is None or self.last is None or self.last <= self.first:
            return 0.0
        return (self.tokens - 1) / (self.last - self.first)


def bench_client() -> httpx.AsyncClient:
    """An HTTP client for benchmark requests: long reads, a new connection per request.

    With pooled keep-alive connections, about one battery cell in three failed
    with "Server disconnected without sending a response" (llama-server closing a
    connection the pool was about to reuse), even with idle connections dropped
    after 2 s. A loopback connection costs well under a millisecond, so none is kept.
    """
    return httpx.AsyncClient(
        timeout=httpx.Timeout(900.0, connect=10.0),
        limits=httpx.Limits(max_keepalive_connections=0),
    )


async def _sse(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in resp.aiter_lines():
        if line.startswith("data: {"):
            event: dict[str, Any] = json.loads(line[6:])
            yield event


WARM_TEXT = "A short note about the weather:"
"""Neutral text whose first tokens warm each backend's pages and threads."""


async def warm_up(http: httpx.AsyncClient, urls: list[str]) -> None:
    """Generate 4 tokens of :data:`WARM_TEXT` on each backend (any profile's vocabulary)."""
    for url in urls:
        r = await http.post(f"{url}/tokenize", json={"content": WARM_TEXT, "add_special": True})
        await direct_run(http, url, [int(t) for t in r.json()["tokens"]], 4, None)


async def direct_run(
    http: httpx.AsyncClient, url: str, ids: list[int], n: int, stop: str | None
) -> Run:
    """Stream native ``/completion`` on token ids and time each token's arrival."""
    body: dict[str, Any] = {
        "prompt": ids,
        "n_predict": n,
        "temperature": 0.0,
        "stream": True,
        "return_tokens": True,
        # Off: with the prompt cache, a repeat evaluates only part of the prompt, in
        # other batch shapes, and CPU numerics then flipped greedy near-ties: baseline
        # differed from its own reference. Without it every repeat computes the same.
        "cache_prompt": False,
    }
    if stop:
        body["stop"] = [stop]
    run = Run()
    t0 = time.perf_counter()
    async with http.stream("POST", f"{url}/completion", json=body) as resp:
        if resp.status_code != 200:
            raise FrondeError(f"{url}/completion: HTTP {resp.status_code}")
        async for ev in _sse(resp):
            if ev.get("content") or ev.get("tokens"):
                tokens: list[Any] = ev.get("tokens") or []
                run.arrived(ev.get("content") or "", [int(t) for t in tokens])
            if ev.get("stop"):
                run.timings = ev.get("timings") or {}
    run.wall_s = time.perf_counter() - t0
    return run


async def routed_run(
    http: httpx.AsyncClient, base: str, prompt: str, n: int, stop: str | None, seed: int
) -> Run:
    """Stream ``/v1/completions`` through Fronde (a new seed misses the prompt cache)."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": n,
        "temperature": 0.0,
        "seed": seed,
        "stream": True,
    }
    if stop:
        body["stop"] = [stop]
    run = Run()
    t0 = time.perf_counter()
    async with http.stream("POST", f"{base}/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            raise FrondeError(f"router: HTTP {resp.status_code}")
        run.route.append(
            f"{resp.headers.get('x-fronde-class')}→{resp.headers.get('x-fronde-mode')}"
        )
        async for ev in _sse(resp):
            if "error" in ev:
                raise FrondeError(f"router stream error: {ev['error']}")
            choices: list[dict[str, Any]] = ev.get("choices") or []
            for choice in choices:
                text = choice.get("text")
                if isinstance(text, str) and text:
                    run.arrived(text)
            timings = ev.get("timings")
            if isinstance(timings, dict):
                run.timings = cast("dict[str, Any]", timings)
            fronde: dict[str, Any] = ev.get("fronde") or {}
            if fronde.get("mode"):
                run.route[-1] = f"{fronde.get('class')}→{fronde.get('mode')}"
    run.wall_s = time.perf_counter() - t0
    return run


def done_keys(path: Path) -> set[str]:
    """Keys (``config|prompt``) that ``path`` holds a successful record for."""
    if not path.exists():
        return set()
    keys: set[str] = set()
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if rec.get("status") == "ok":
                keys.add(str(rec["key"]))
    return keys


@contextlib.asynccontextmanager
async def all_started(
    procs: Mapping[Any, LlamaServerProcess],
) -> AsyncGenerator[None]:
    """Start every process at once, and stop them all on exit (also after a failed start).

    Raises:
        FrondeError: a backend could not start (the others are stopped).
    """
    try:
        await asyncio.gather(*(p.start() for p in procs.values()))
        yield
    finally:
        await asyncio.gather(*(p.stop() for p in procs.values()), return_exceptions=True)


@contextlib.asynccontextmanager
async def backends(
    settings: Settings, config_file: Path | None, configs: list[Config], log_dir: Path
) -> AsyncGenerator[tuple[dict[str, LlamaServerProcess], RunningServe | None, str]]:
    """Start one warm llama-server per direct config, and `fronde serve` for the router.

    Yields:
        (config name → its process, the running `fronde serve` or None, the
        llama-server ``--version`` line).

    Raises:
        FrondeError: a backend or `fronde serve` could not start.
    """
    binary = find_llama_binary(settings.cache_dir, settings.llama_server)
    profile = profile_of(settings)
    base_args = plan_pool(settings, profile, binary, log_dir).specs[Mode.BASELINE].args
    procs: dict[str, LlamaServerProcess] = {}
    for c in configs:
        if not c.router:
            spec = LaunchSpec(c.name, binary, [*base_args, *c.args], log_dir / f"{c.name}.log")
            procs[c.name] = LlamaServerProcess(
                spec, start_timeout_s=settings.backend.start_timeout_s
            )
    async with all_started(procs):
        if any(c.router for c in configs):
            with running_serve(config_file, settings.backend.start_timeout_s + 30) as serve:
                yield procs, serve, llama_build_info(binary)
        else:
            yield procs, None, llama_build_info(binary)


async def run_battery(
    settings: Settings,
    config_file: Path | None,
    out: Path,
    options: BatteryOptions,
    *,
    resume: bool = False,
    progress: Callable[[str], None] = lambda _m: None,
) -> Path:
    """Run the battery and append its records to ``out`` (JSONL).

    Args:
        settings: where the binary, model and backend settings come from.
        config_file: passed to the `fronde serve` that runs the router.
        out: the JSONL file; created, or appended to.
        options: repetitions, lengths, subsets.
        resume: skip cells that ``out`` already holds a successful record for.
        progress: called with one line per finished cell.

    Returns:
        ``out``.

    Raises:
        FrondeError: a backend or `fronde serve` could not start.
    """
    profile = profile_of(settings)
    draft = model_path(settings.models_dir, profile.draft) if profile.draft else None
    configs = [
        c
        for c in battery_configs(draft)
        if not options.configs or c.name in options.configs or c.name == "baseline"
    ]
    prompts = [p for p in BATTERY if not options.prompts or p.name in options.prompts]
    done: set[str] = done_keys(out) if resume else set()
    out.parent.mkdir(parents=True, exist_ok=True)
    async with backends(settings, config_file, configs, out.parent) as (procs, serve, build):
        info = run_info() | {"llama_build": build, "profile": settings.profile}
        async with bench_client() as http:
            base_url = procs["baseline"].url
            await warm_up(http, [p.url for p in procs.values()])
            seed = [1000]

            async def measure(cfg: Config, prompt: BatteryPrompt, ids: list[int]) -> Run:
                n = options.gen_tokens if prompt.kind == "generation" else options.edit_tokens
                if cfg.router and serve is not None:
                    seed[0] += 1
                    return await routed_run(
                        http, serve.base_url, prompt.prompt, n, prompt.stop, seed[0]
                    )
                return await direct_run(http, procs[cfg.name].url, ids, n, prompt.stop)

            async def reference(prompt: BatteryPrompt, ids: list[int]) -> list[Run]:
                return [await measure(configs[0], prompt, ids) for _ in range(options.reps)]

            for prompt in prompts:
                r = await http.post(
                    f"{base_url}/tokenize",
                    json={"content": prompt.prompt, "add_special": True, "parse_special": True},
                )
                ids = [int(t) for t in r.json()["tokens"]]
                last_ref: list[Run] | None = None
                base_ids: list[int] | None = None
                for cfg in configs:
                    key = f"{cfg.name}|{prompt.name}"
                    if key in done:
                        continue
                    try:
                        record, last_ref, base_ids = await _cell(
                            cfg, prompt, ids, last_ref, base_ids, measure, reference
                        )
                        if cfg.router and base_ids is not None:
                            tok = await http.post(
                                f"{base_url}/tokenize",
                                json={"content": record["output"], "add_special": False},
                            )
                            router_ids = [int(t) for t in tok.json()["tokens"]]
                            record["first_diff"] = first_difference(router_ids, base_ids)
                            record["same_as_baseline"] = record["first_diff"] is None
                    except (FrondeError, httpx.HTTPError, KeyError, ValueError) as exc:
                        record = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
                        last_ref = None
                        log.warning("battery.cell_failed", key=key, error=record["error"])
                    full = {
                        "schema_version": SCHEMA_VERSION,
                        "key": key,
                        "config": cfg.name,
                        "prompt": prompt.name,
                        "content": prompt.content,
                        "kind": prompt.kind,
                        "reps": options.reps,
                        **record,
                        **info,
                    }
                    with out.open("a") as fh:
                        fh.write(json.dumps(full, ensure_ascii=False) + "\n")
                    progress(_line(full))
    return out


async def _cell(
    cfg: Config,
    prompt: BatteryPrompt,
    ids: list[int],
    last_ref: list[Run] | None,
    base_ids: list[int] | None,
    measure: Callable[[Config, BatteryPrompt, list[int]], Any],
    reference: Callable[[BatteryPrompt, list[int]], Any],
) -> tuple[dict[str, Any], list[Run], list[int] | None]:
    """Measure one config on one prompt between references; rerun once on drift."""
    attempts = 0
    while True:
        attempts += 1
        before: list[Run] = last_ref if last_ref is not None else await reference(prompt, ids)
        if base_ids is None:
            base_ids = before[0].ids
        runs: list[Run] = [await measure(cfg, prompt, ids) for _ in range(len(before))]
        after: list[Run] = await reference(prompt, ids)
        b = bracket(
            [r.client_tok_s for r in before],
            [r.client_tok_s for r in runs],
            [r.client_tok_s for r in after],
        )
        last_ref = after
        if b.valid or attempts == 2:
            break
        last_ref = None  # fresh references for the rerun
    best = runs[int(np.argsort([r.client_tok_s for r in runs])[len(runs) // 2])]
    t = best.timings
    drafted = int(t.get("draft_n") or 0)
    accepted = int(t.get("draft_n_accepted") or 0)
    n = best.tokens
    rep = repetition_score(best.text)
    record: dict[str, Any] = {
        "status": "ok",
        "decode_tok_s": round(float(np.median([r.client_tok_s for r in runs])), 3),
        "server_decode_tok_s": round(
            float(np.median([float(r.timings.get("predicted_per_second") or 0) for r in runs])), 3
        ),
        "prefill_tok_s": t.get("prompt_per_second"),
        "prompt_n": t.get("prompt_n"),
        "wall_s": round(float(np.median([r.wall_s for r in runs])), 3),
        "tokens": n,
        "alpha": accepted / drafted if drafted else None,
        "tau": n / (n - accepted) if drafted and n > accepted else None,
        "baseline_before": round(b.before, 3),
        "baseline_after": round(b.after, 3),
        "ratio": round(b.ratio, 4),
        "drift": round(b.drift, 4),
        "drift_limit": DRIFT_LIMIT,
        "valid": b.valid,
        "attempts": attempts,
        "output": best.text,
        "output_sha256": hashlib.sha256(best.text.encode()).hexdigest(),
        "first_diff": first_difference(best.ids, base_ids) if best.ids else None,
        "same_as_baseline": best.ids == base_ids if best.ids else None,
        "repetition": round(rep, 4),
        "degenerate": rep > DEGENERATE_SCORE,
        "routes": [x for r in runs for x in r.route],
    }
    return record, last_ref, base_ids


def _line(rec: dict[str, Any]) -> str:
    if rec.get("status") != "ok":
        return f"{rec['key']}: FAILED {rec.get('error')}"
    alpha = rec.get("alpha")
    a = f" α {alpha:.2f}" if isinstance(alpha, float) else ""
    flag = "" if rec["valid"] else " INVALID"
    return (
        f"{rec['key']}: {rec['decode_tok_s']:.1f} tok/s, ×{rec['ratio']:.2f} baseline"
        f"{a}, drift {rec['drift'] * 100:.1f} %{flag}"
    )
