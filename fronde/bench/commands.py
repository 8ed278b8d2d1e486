"""``fronde bench``: the benchmark commands, one typer sub-app that :mod:`fronde.cli` adds.

Each command answers one question (:data:`BENCH_MAP`) and lives in a ``commands_*``
module of its noun; they import the harness inside each command, so ``fronde --help``
loads neither it nor matplotlib.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fronde.bench.commands_experiments import bench_atlas, bench_overhead, bench_shadow, bench_swap
from fronde.bench.commands_features import bench_prediction, bench_structured, bench_tools
from fronde.bench.commands_load import bench_load
from fronde.bench.commands_report import bench_report
from fronde.bench.commands_verdict import bench_verdict
from fronde.cli_help import fronde_typer

__all__ = ["BENCH_EXTRA", "BENCH_MAP", "bench_app"]

BENCH_EXTRA = frozenset({"numpy", "matplotlib", "jsonschema"})
"""The ``bench`` extra's packages by import name: an install for serving alone lacks them."""

bench_app = fronde_typer(
    "Benchmarks on one harness: each command answers the question next to it, in the"
    " time measured on 2 CPU cores (at its defaults, unless options are named).\n\n"
    "Start with verdict, the main job (./reproduce.sh runs it). Each command writes its"
    " records under runs/ and shows how many requests are done, the time spent and the"
    " time left."
)
_MAIN_PANEL = "Is Fronde faster? The main job"
_OTHER_PANEL = "Other questions"
BENCH_MAP = {
    "verdict": "Is Fronde faster than the one llama-server you would run instead?"
    " 2 cores: ~30 min, --quick ~10 min",
    "report": "Print a verdict or load run's tables and answer again; redraw its charts (seconds)",
    "overhead": "What does the proxy cost? 2 cores: 1 min with --requests 20 --reps 1"
    " (the defaults: not timed)",
    "atlas": "Where does speculation pay? 2 cores: ~40 min (timed before it moved onto"
    " the harness)",
    "load": "With many agents at once, is Fronde faster than one llama-server? For a GPU;"
    " 2 cores: 4 min with --clients 1 --clients 4 --items 8 --max-tokens 16",
    "tools": "What does routing tool-bearing requests give an agent? 2 cores: its 48"
    " requests 230 s (SmolLM2), start-ups not timed",
    "structured": "Does speculation keep JSON, schemas, grammars, tool calls and logprobs"
    " valid? 2 cores: 90 s (SmolLM2)",
    "prediction": "Does a Predicted Output pay? 2 cores: its 32 requests 70 s (SmolLM2),"
    " start-ups not timed",
    "swap": "With one server resident, do epochs beat a swap per mode change? 2 cores:"
    " 12 s with --requests 6 --reps 1 --max-tokens 8 (the defaults: not timed)",
    "shadow": "Does shadow acceptance track the real α? 2 cores: 34 s with --max-tokens 64"
    " (the default 256: not timed)",
}
"""`fronde bench --help`'s map: each question and its time on the README's 2-core Xeon."""

_COMMANDS: dict[str, Callable[..., Any]] = {
    c.__name__.removeprefix("bench_"): c
    for group in (
        (bench_verdict, bench_report, bench_overhead, bench_atlas, bench_load, bench_tools),
        (bench_structured, bench_prediction, bench_swap, bench_shadow),
    )
    for c in group
}
"""Each command's function, by its name (``bench_NAME``)."""

# In BENCH_MAP's order (typer lists commands as registered); the first two are the main job.
for _k, _name in enumerate(BENCH_MAP):
    _panel = _MAIN_PANEL if _k < 2 else _OTHER_PANEL
    bench_app.command(_name, short_help=BENCH_MAP[_name], rich_help_panel=_panel)(_COMMANDS[_name])
