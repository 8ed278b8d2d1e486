"""The feature questions: structured output, Predicted Outputs, tool-bearing agent steps.

``fronde bench structured``, ``fronde bench prediction`` and ``fronde bench tools``:
each starts ``fronde serve`` (fresh for every arm), sends its requests and writes its
records and one Markdown page.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fronde.cli_options import ConfigOpt, settings_from

if TYPE_CHECKING:
    from fronde.config import Settings

__all__ = ["bench_prediction", "bench_structured", "bench_tools"]


def _run_title(settings: Settings, what: str) -> str:
    """A results page's title: ``what`` with the profile and the machine."""
    from fronde.bench.serve import machine_line
    from fronde.runtime.local import profile_of

    return f"{what}: {profile_of(settings).name}, {machine_line()}"


def _write_run(out: Path, records: Sequence[Any], name: str, page: str) -> Path:
    """Write a benchmark's ``records`` (dataclasses) to ``out/records.jsonl``.

    And ``page`` to ``out/name``; returns the page's path.
    """
    import dataclasses
    import json

    out.mkdir(parents=True, exist_ok=True)
    with (out / "records.jsonl").open("w") as fh:
        for record in records:
            fh.write(json.dumps(dataclasses.asdict(record), ensure_ascii=False) + "\n")
    path = out / name
    path.write_text(page)
    return path


def bench_structured(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and matrix.md")] = Path(
        "runs/structured"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=16)] = 160,
) -> None:
    """Does speculation keep JSON, schemas, grammars, tool calls and logprobs valid?"""
    from fronde.bench.progress import bench_console, bench_progress
    from fronde.bench.serve import running_serve
    from fronde.bench.structured import cells, matrix_markdown, run_matrix
    from fronde.bench.structured_features import FEATURES, PROMPTS

    settings = settings_from(config)
    console = bench_console()
    modes = ("baseline", "ngram-simple", "ngram-mod", "cascade")
    args = tuple(a for m in modes for a in ("--mode", m))
    total = len(FEATURES) * 2 * len(PROMPTS) * len(modes)
    with bench_progress(console, total, "answers") as step:
        step.status(f"starting fronde serve with {len(modes)} modes")
        with running_serve(config, extra_args=args) as serve:
            step.status(f"{len(FEATURES)} features × 2 temperatures × {len(PROMPTS)} prompts")
            samples = run_matrix(serve.backend_urls, max_tokens=max_tokens, progress=step)
    title = _run_title(settings, "Structured output under speculation")
    page = _write_run(out, samples, "matrix.md", matrix_markdown(cells(samples), title))
    console.print(f"matrix: {page}", markup=False, highlight=False)


def bench_prediction(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and prediction.md")] = Path(
        "runs/prediction"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=16)] = 192,
) -> None:
    """Does a Predicted Output pay? Edits with and without `prediction`, fresh servers."""
    from fronde.bench.prediction import EDITS, PredictionSample, prediction_grid, run_prediction
    from fronde.bench.progress import bench_console, bench_progress
    from fronde.bench.serve import running_serve

    settings = settings_from(config)
    console = bench_console()
    samples: list[PredictionSample] = []
    scenarios = ("file-in-prompt", "diff-only")
    with bench_progress(console, len(EDITS) * 2 * len(scenarios)) as step:
        for scenario in scenarios:
            for arm in ("without", "with"):  # each on a fresh server: an empty pool
                step.status(f"{scenario}, {arm} prediction: starting fronde serve (ngram-mod)")
                with running_serve(config, extra_args=("--mode", "ngram-mod")) as serve:
                    step.status(f"{scenario}, {arm} prediction: {len(EDITS)} edits")
                    samples += run_prediction(serve.base_url, scenario, arm, max_tokens, step)
    grid = prediction_grid(samples, _run_title(settings, "Predicted Outputs"))
    page = _write_run(out, samples, "prediction.md", grid.markdown())
    console.print(grid)
    console.print(f"page: {page}", markup=False, highlight=False)


def bench_tools(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and tools.md")] = Path(
        "runs/tools"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per step without its own", min=16)] = 128,
) -> None:
    """What does routing tool-bearing requests give an agent? Before and after, fresh servers."""
    from fronde.bench.progress import bench_console, bench_progress
    from fronde.bench.serve import running_serve
    from fronde.bench.tooluse import ToolStep, run_tool_session, tool_grid
    from fronde.bench.workloads import load_workload

    settings = settings_from(config)
    console = bench_console()
    steps: list[ToolStep] = []
    arms = {"before": {"FRONDE_ROUTER__SPECULATE_STRUCTURED": "false"}, "after": {}}
    n_steps = len(load_workload("agent-sessions").items)
    with bench_progress(console, 2 * n_steps, "steps") as step:
        for arm, env in arms.items():
            step.status(f"{arm}: starting fronde serve")
            with running_serve(config, env=env) as serve:
                step.status(f"{arm}: {n_steps} agent steps with a tool list")
                steps += run_tool_session(serve.base_url, arm, max_tokens, step)
    grid = tool_grid(steps, _run_title(settings, "Tool-bearing agent steps"))
    page = _write_run(out, steps, "tools.md", grid.markdown())
    console.print(grid)
    console.print(f"page: {page}", markup=False, highlight=False)
