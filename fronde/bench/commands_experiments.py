"""The experiments on the harness: overhead, swap, shadow acceptance and the atlas.

Each runs its plan into a resumable ``records.jsonl`` (:func:`run_plans`) and prints
its table; ``atlas`` also writes ``atlas.md`` with llama-bench's break-even map.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fronde.cli_options import ConfigOpt, settings_from
from fronde.errors import FrondeError

if TYPE_CHECKING:
    from fronde.config import Settings

__all__ = [
    "bench_atlas", "bench_overhead", "bench_shadow", "bench_swap", "run_experiment",
    "run_plans",
]  # fmt: skip


def bench_swap(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl")] = Path("runs/swap"),
    requests: Annotated[int, typer.Option(help="requests in the mixed workload", min=3)] = 24,
    max_tokens: Annotated[int, typer.Option(help="tokens generated per request", min=1)] = 32,
    gap_s: Annotated[float, typer.Option(help="seconds between two arrivals", min=0)] = 0.25,
    reps: Annotated[int, typer.Option(help="runs of each policy", min=1)] = 2,
    max_epoch_s: Annotated[
        float, typer.Option(help="the epoch arm's swap.max_epoch_s", min=1)
    ] = 30,
) -> None:
    """With one server resident, do epochs beat a swap per mode change?

    Swap residency (one llama-server up): Fronde's epochs against a swap at every
    mode change.
    """
    from fronde.bench.experiments import swap_plan, swap_table
    from fronde.bench.progress import bench_console

    settings = settings_from(config)
    plan = swap_plan(requests, max_tokens, gap_s, reps, max_epoch_s)
    blocks = run_experiment(plan, settings, config, out, "swap", {"max_tokens": max_tokens})
    bench_console().print(swap_table(blocks))


def bench_overhead(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl")] = Path("runs/overhead"),
    llama_server: Annotated[
        Path | None,
        typer.Option(
            help="a fake llama-server executable that takes --fake-tps, instead of the built one "
            "(scripts/overhead-fake.sh passes the test suite's, to measure the proxies alone)"
        ),
    ] = None,
    requests: Annotated[int, typer.Option(help="requests per level", min=10)] = 200,
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=2)] = 16,
    reps: Annotated[int, typer.Option(help="repetitions", min=1)] = 3,
    litellm: Annotated[bool, typer.Option(help="include LiteLLM's proxy")] = True,
) -> None:
    """What does the proxy cost? Latency direct, through Fronde, through LiteLLM.

    scripts/overhead-fake.sh runs it on a fake llama-server: the proxies' own time.
    """
    from fronde.bench.experiments import overhead_plan

    settings = settings_from(config)
    if llama_server is not None:
        if not os.access(llama_server, os.X_OK):
            raise FrondeError(f"--llama-server {llama_server}: not an executable file")
        backend = settings.backend.model_copy(update={"extra_args": ["--fake-tps", "100000"]})
        settings = settings.model_copy(update={"llama_server": llama_server, "backend": backend})
    fake = str(llama_server) if llama_server is not None else None
    plan = overhead_plan(fake, requests, max_tokens, reps, litellm)
    identity = {"max_tokens": max_tokens, "backend": "fake" if fake else "llama-server"}
    run_experiment(plan, settings, config, out, "overhead (ms)", identity)


def bench_shadow(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl")] = Path("runs/shadow"),
    max_tokens: Annotated[int, typer.Option(help="tokens generated per request", min=8)] = 256,
    probe_tokens: Annotated[int, typer.Option(help="tokens a probe leaves", min=8)] = 48,
) -> None:
    """Does shadow acceptance track the real α? Replayed against real, per prompt and mode."""
    import asyncio

    import httpx

    from fronde.bench.arms import Arm, started
    from fronde.bench.progress import bench_console
    from fronde.bench.shadow import shadow_plan, shadow_rows, shadow_table
    from fronde.bench.store import Store

    settings = settings_from(config)
    plan = shadow_plan(settings, max_tokens)
    run_experiment(plan, settings, config, out, "shadow: speed", {"max_tokens": max_tokens})
    [workload] = plan.workloads

    async def tokenized() -> dict[str, list[int]]:
        async with (
            started(Arm("tokenizer", "static"), settings, config, out / "logs") as t,
            httpx.AsyncClient(timeout=60) as http,
        ):
            ids: dict[str, list[int]] = {}
            for item in workload.items:
                body = {"content": item.prompt, "add_special": True, "parse_special": True}
                r = await http.post(f"{t.base_url}/tokenize", json=body)
                ids[item.prompt] = [int(x) for x in r.json()["tokens"]]
            return ids

    ids = asyncio.run(tokenized())
    samples = Store(out / "records.jsonl").samples()
    n_match = settings.speculation.ngram_mod_n_match
    rows = shadow_rows(
        samples, workload, ids.__getitem__, n_match=n_match, probe_tokens=probe_tokens
    )
    bench_console().print(shadow_table(rows))


def bench_atlas(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for the records, charts and atlas.md")] = Path(
        "runs/atlas"
    ),
    reps: Annotated[int, typer.Option(help="repetitions of every block", min=1)] = 2,
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=8)] = 64,
    per_domain: Annotated[
        int | None, typer.Option(help="prompts per domain [default: all 5]", min=1, max=5)
    ] = None,
    quant: Annotated[
        list[str] | None,
        typer.Option(
            "--quant", help="llama-quantize types derived from the shipped model (repeatable)"
        ),
    ] = None,
    verify: Annotated[bool, typer.Option(help="measure verify costs with llama-bench")] = True,
    verify_reps: Annotated[int, typer.Option(help="llama-bench repetitions per k", min=1)] = 3,
    max_k: Annotated[
        int, typer.Option(help="verify batches of k = 1…MAX_K tokens", min=2, max=512)
    ] = 64,
    verify_depth: Annotated[
        int, typer.Option(help="context tokens before each batch", min=0)
    ] = 256,
    ngl: Annotated[
        int | None, typer.Option(help="llama-bench -ngl (GPU offload) [default: the backend's]")
    ] = None,
) -> None:
    """Where does speculation pay? α, τ and speed by domain and quantization (resumable).

    With llama-bench's verify costs, the break-even map.
    """
    import asyncio
    import json

    from fronde.bench.atlas import check_quants, run_atlas, write_atlas_page
    from fronde.bench.breakeven import VerifyCosts
    from fronde.bench.progress import bench_console, bench_progress
    from fronde.runtime.local import profile_of
    from fronde.runtime.models import model_path

    check_quants(quant or ())
    settings = settings_from(config)
    console = bench_console()
    profile = profile_of(settings)
    target = model_path(settings.models_dir, profile.target, profile.name)
    costs_file = out / "verify-cost.json"
    per_variant = 10 * (per_domain or 5) * 3 * reps
    with bench_progress(console, per_variant * (1 + len(quant or ()))) as advance:
        if verify and not costs_file.is_file():
            k = (max_k, verify_depth, verify_reps)
            _measure_verify_costs(settings, target, costs_file, k, ngl, advance.status)
        variants = _variants(settings, target, quant or (), advance.status)
        asyncio.run(
            run_atlas(
                settings,
                config,
                out,
                variants,
                reps=reps,
                max_tokens=max_tokens,
                per_domain=per_domain,
                progress=advance,
                status=advance.status,
            )
        )
    costs = (
        VerifyCosts.from_json(json.loads(costs_file.read_text())) if costs_file.is_file() else None
    )
    page = write_atlas_page(out, [name for name, _ in variants], costs)
    console.print(f"atlas: {page}", markup=False, highlight=False)


def _measure_verify_costs(
    settings: Settings,
    target: Path,
    costs_file: Path,
    k: tuple[int, int, int],
    ngl: int | None,
    status: Callable[[str], None],
) -> None:
    """Measure the target's verify costs with llama-bench into ``costs_file`` (JSON).

    ``k``: ``(--max-k, --verify-depth, --verify-reps)``; ``ngl`` None: the backend's.
    """
    import json

    from fronde.bench.breakeven import measure_verify_costs
    from fronde.bench.serve import machine_line
    from fronde.runtime.install import find_llama_binary

    max_k, verify_depth, verify_reps = k
    # One llama-bench run: no count moves until it ends, the elapsed time does.
    status(f"verify cost: llama-bench, k = 1…{max_k} at depth {verify_depth}")
    costs = measure_verify_costs(
        find_llama_binary(settings.cache_dir, name="llama-bench"),
        target,
        ks=tuple(range(1, max_k + 1)),
        depth=verify_depth,
        reps=verify_reps,
        threads=settings.backend.threads,
        n_gpu_layers=ngl if ngl is not None else settings.backend.n_gpu_layers,
        machine=machine_line(),
    )
    costs_file.parent.mkdir(parents=True, exist_ok=True)
    costs_file.write_text(json.dumps(costs.to_json(), indent=2))


def _variants(
    settings: Settings, target: Path, quant: Sequence[str], status: Callable[[str], None]
) -> list[tuple[str, Path | None]]:
    """``(name, GGUF)``: the shipped model (None), then each ``--quant`` by llama-quantize."""
    from fronde.bench.atlas import SHIPPED, requantize
    from fronde.runtime.install import find_llama_binary

    variants: list[tuple[str, Path | None]] = [(SHIPPED, None)]
    if quant:
        quantize = find_llama_binary(settings.cache_dir, name="llama-quantize")
        for q in quant:
            status(f"llama-quantize: {q} from {SHIPPED}")
            variants += [(q, requantize(quantize, target, q, settings.cache_dir / "atlas"))]
    return variants


def run_plans(
    plans: Sequence[Any],
    settings: Settings,
    config: Path | None,
    out: Path,
    identity: dict[str, Any],
    run: dict[str, Any] | None = None,
    head: str = "",
) -> Any:
    """Run ``plans`` into ``out/records.jsonl`` (resumable); return the store.

    ``identity``: what a resumed run must share besides the machine; ``run``: more
    fields of the run record; ``head``: a line printed before the progress display.
    """
    import asyncio

    from fronde.bench.blocks import run_plan
    from fronde.bench.progress import bench_console, bench_progress
    from fronde.bench.protocol import planned_requests
    from fronde.bench.serve import run_info
    from fronde.bench.store import Store

    store = Store(out / "records.jsonl")
    info = run_info()
    arms = list(dict.fromkeys(a.name for p in plans for a in p.arms))
    store.begin({**info, "arms": arms, **(run or {})}, {"machine": info["machine"], **identity})
    console = bench_console()
    if head:
        console.print(head, markup=False, highlight=False)
    with bench_progress(console, sum(planned_requests(p) for p in plans)) as advance:

        async def run_all() -> None:
            for plan in plans:
                await run_plan(plan, settings, config, store, out / "logs", advance, advance.status)

        asyncio.run(run_all())
    return store


def run_experiment(
    plan: Any,
    settings: Settings,
    config: Path | None,
    out: Path,
    title: str,
    identity: dict[str, Any],
) -> list[dict[str, Any]]:
    """Run an experiment's plan into ``out/records.jsonl`` (resumable); print its table."""
    from fronde.bench.experiments import latency_table
    from fronde.bench.progress import bench_console

    store = run_plans([plan], settings, config, out, identity)
    console = bench_console()
    console.print(latency_table(store.samples(), title))
    console.print(f"records: {store.path}", markup=False, highlight=False)
    return [r for r in store.records() if r["type"] == "block" and r["ok"]]
