"""The feature questions: structured output, Predicted Outputs, tool-bearing agent steps.

Each runs its plans on the harness into a resumable ``records.jsonl`` and writes one
Markdown page read off those records.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

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


def _write_page(out: Path, name: str, page: str, failed: int) -> Path:
    """Write ``page`` to ``out/name``, a line on the failed requests added if any."""
    tail = f"\n{failed} requests failed (left out; their errors are in records.jsonl).\n"
    path = out / name
    path.write_text(page + (tail if failed else ""))
    return path


def bench_structured(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and matrix.md")] = Path(
        "runs/structured"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=16)] = 160,
) -> None:
    """Does speculation keep JSON, schemas, grammars, tool calls and logprobs valid?"""
    from fronde.bench.commands_experiments import run_plans
    from fronde.bench.progress import bench_console
    from fronde.bench.structured import cells, matrix_markdown, matrix_plan, matrix_samples

    settings = settings_from(config)
    plan = matrix_plan(max_tokens)
    store = run_plans([plan], settings, config, out, {"max_tokens": max_tokens})
    title = _run_title(settings, "Structured output under speculation")
    page = _write_page(
        out, "matrix.md", matrix_markdown(cells(matrix_samples(store.samples())), title), 0
    )
    bench_console().print(f"matrix: {page}", markup=False, highlight=False)


def bench_prediction(
    config: ConfigOpt = None,
    out: Annotated[Path, typer.Option(help="folder for records.jsonl and prediction.md")] = Path(
        "runs/prediction"
    ),
    max_tokens: Annotated[int, typer.Option(help="tokens per answer", min=16)] = 192,
) -> None:
    """Does a Predicted Output pay? Edits with and without `prediction`, fresh servers."""
    from fronde.bench.commands_experiments import run_plans
    from fronde.bench.prediction import prediction_grid, prediction_plans, prediction_samples
    from fronde.bench.progress import bench_console

    settings = settings_from(config)
    store = run_plans(
        prediction_plans(max_tokens), settings, config, out, {"max_tokens": max_tokens}
    )
    records = store.samples()
    grid = prediction_grid(prediction_samples(records), _run_title(settings, "Predicted Outputs"))
    page = _write_page(out, "prediction.md", grid.markdown(), sum(not r["ok"] for r in records))
    console = bench_console()
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
    from fronde.bench.commands_experiments import run_plans
    from fronde.bench.progress import bench_console
    from fronde.bench.tooluse import tool_grid, tool_steps, tools_plan

    settings = settings_from(config)
    store = run_plans([tools_plan(max_tokens)], settings, config, out, {"max_tokens": max_tokens})
    records = store.samples()
    grid = tool_grid(tool_steps(records), _run_title(settings, "Tool-bearing agent steps"))
    page = _write_page(out, "tools.md", grid.markdown(), sum(not r["ok"] for r in records))
    console = bench_console()
    console.print(grid)
    console.print(f"page: {page}", markup=False, highlight=False)
